// See staged_communicator.h.
#include "comm/staged/staged_communicator.h"

#include <functional>
#include <mutex>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"

namespace partrain::comm {
namespace {

// A device buffer's host copy: floats for f32 and bf16, int32 for i32.
struct HostCopy {
  std::vector<float> f;
  std::vector<int32_t> i;
  Buffer buffer;  // the host buffer Gloo moves

  HostCopy(DType device_dtype, size_t count) {
    if (device_dtype == DType::kI32) {
      i.resize(count);
      buffer = Buffer{i.data(), DType::kI32, count, Memory::kHost};
    } else {
      f.resize(count);
      buffer = Buffer{f.data(), DType::kF32, count, Memory::kHost};
    }
  }
};

// Gloo's work, then the copy back to the device; the host copies live until then.
class StagedWork final : public Work {
 public:
  StagedWork(WorkHandle inner, std::function<Status()> finish, std::vector<std::shared_ptr<HostCopy>> keep)
      : inner_(std::move(inner)), finish_(std::move(finish)), keep_(std::move(keep)) {}
  Status wait() override {
    std::lock_guard lock(mu_);
    if (done_) return status_;
    done_ = true;
    status_ = inner_->wait();
    if (status_ && finish_) status_ = finish_();
    keep_.clear();
    return status_;
  }

 private:
  WorkHandle inner_;
  std::function<Status()> finish_;
  std::vector<std::shared_ptr<HostCopy>> keep_;
  std::mutex mu_;
  bool done_ = false;
  Status status_;
};

class StagedCommunicator final : public Communicator {
 public:
  explicit StagedCommunicator(std::unique_ptr<Communicator> gloo) : gloo_(std::move(gloo)) { rank_ = gloo_->rank(); }

  const char* backend() const override { return "staged"; }
  const GroupSpec& group() const override { return gloo_->group(); }
  Memory memory() const override { return Memory::kDevice; }
  void set(std::unique_ptr<DeviceStaging> staging) { staging_ = std::move(staging); }

  WorkHandle all_reduce(const Buffer& data, ReduceOp op) override {
    auto h = stage_in("all_reduce", data);
    if (!h) return finished_work(h.status());
    auto copy = *h;
    return staged(gloo_->all_reduce(copy->buffer, op), {copy}, [this, data, copy] { return back(data, *copy); });
  }

  WorkHandle reduce_scatter(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts,
                            ReduceOp op) override {
    auto hi = stage_in("reduce_scatter", in);
    if (!hi) return finished_work(hi.status());
    auto ho = stage_out("reduce_scatter", out);
    if (!ho) return finished_work(ho.status());
    auto a = *hi, b = *ho;
    return staged(gloo_->reduce_scatter(a->buffer, b->buffer, counts, op), {a, b}, [this, out, b] { return back(out, *b); });
  }

  WorkHandle all_gather(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts) override {
    auto hi = stage_in("all_gather", in);
    if (!hi) return finished_work(hi.status());
    auto ho = stage_out("all_gather", out);
    if (!ho) return finished_work(ho.status());
    auto a = *hi, b = *ho;
    return staged(gloo_->all_gather(a->buffer, b->buffer, counts), {a, b}, [this, out, b] { return back(out, *b); });
  }

  WorkHandle all_to_allv(const Buffer& in, const std::vector<size_t>& send_counts, const Buffer& out,
                         const std::vector<size_t>& recv_counts) override {
    auto hi = stage_in("all_to_allv", in);
    if (!hi) return finished_work(hi.status());
    auto ho = stage_out("all_to_allv", out);
    if (!ho) return finished_work(ho.status());
    auto a = *hi, b = *ho;
    return staged(gloo_->all_to_allv(a->buffer, send_counts, b->buffer, recv_counts), {a, b},
                  [this, out, b] { return back(out, *b); });
  }

  WorkHandle broadcast(const Buffer& data, int root) override {
    auto h = stage_in("broadcast", data);
    if (!h) return finished_work(h.status());
    auto copy = *h;
    return staged(gloo_->broadcast(copy->buffer, root), {copy}, [this, data, copy] { return back(data, *copy); });
  }

  WorkHandle batch_send_recv(const std::vector<P2pOp>& ops) override {
    std::vector<P2pOp> host;
    std::vector<std::shared_ptr<HostCopy>> copies;
    std::vector<std::pair<Buffer, std::shared_ptr<HostCopy>>> recvs;
    for (const P2pOp& o : ops) {
      auto h = o.is_send ? stage_in("send", o.buf) : stage_out("recv", o.buf);
      if (!h) return finished_work(h.status());
      host.push_back(P2pOp{o.is_send, (*h)->buffer, o.peer});
      copies.push_back(*h);
      if (!o.is_send) recvs.emplace_back(o.buf, *h);
    }
    return staged(gloo_->batch_send_recv(host), std::move(copies), [this, recvs] {
      for (const auto& [dev, copy] : recvs) PARTRAIN_RETURN_IF_ERROR(back(dev, *copy));
      return Status::ok();
    });
  }

  WorkHandle barrier() override { return gloo_->barrier(); }
  void abort(const std::string& reason) override { gloo_->abort(reason); }

 private:
  // A device buffer's checks, then its host copy (the device's values, waited for).
  Result<std::shared_ptr<HostCopy>> stage_in(const char* op, const Buffer& b) {
    auto h = stage_out(op, b);
    if (!h) return h.status();
    if (b.count > 0) PARTRAIN_RETURN_IF_ERROR(staging_->to_host(b, (*h)->buffer.data));
    return h;
  }
  // The same for an output: room only.
  Result<std::shared_ptr<HostCopy>> stage_out(const char* op, const Buffer& b) {
    PARTRAIN_RETURN_IF_ERROR(check_buffer(op, b));
    if (!staging_) {
      return Status::invalid(fmt::format("{} on {}: the staged transport has no device yet; bind it to the "
                                         "backend first (worker/transports.h bind_to_backend)", op, describe()));
    }
    return std::make_shared<HostCopy>(b.dtype, b.count);
  }
  Status back(const Buffer& dev, const HostCopy& h) {
    if (dev.count == 0) return Status::ok();
    return staging_->from_host(dev, h.buffer.data).prefixed(describe() + ": ");
  }
  WorkHandle staged(WorkHandle inner, std::vector<std::shared_ptr<HostCopy>> keep, std::function<Status()> finish) {
    return std::make_shared<StagedWork>(std::move(inner), std::move(finish), std::move(keep));
  }

  std::unique_ptr<Communicator> gloo_;
  std::unique_ptr<DeviceStaging> staging_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> create_staged_communicator(const GroupSpec& spec, RendezvousClient& store,
                                                                 const GlooOptions& options) {
  Result<std::unique_ptr<Communicator>> gloo = create_gloo_communicator(spec, store, options);
  if (!gloo) return gloo.status();
  return std::unique_ptr<Communicator>(std::make_unique<StagedCommunicator>(std::move(gloo).value()));
}

Status set_staging(Communicator& comm, std::unique_ptr<DeviceStaging> staging) {
  auto* staged = dynamic_cast<StagedCommunicator*>(&comm);
  if (staged == nullptr) {
    return Status::invalid(fmt::format("group '{}' is a {} communicator, not the staged transport", comm.group().name,
                                       comm.backend()));
  }
  staged->set(std::move(staging));
  return Status::ok();
}

}  // namespace partrain::comm
