// See emu_nccl.h. Two Gloo communicators per group: `data_` moves the payloads, `side_`
// the call signatures and the point-to-point headers, so a mismatch is found before a
// payload of the wrong size is waited for.
#include "gpu/emu/emu_nccl.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <thread>
#include <array>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/keys.h"
#include "common/log.h"
#include "gpu/emu/device_arena.h"

namespace partrain::gpu::emu {
namespace {

using comm::Buffer;
using comm::Communicator;
using comm::Memory;
using comm::ReduceOp;
using comm::Work;
using comm::WorkHandle;

// One collective call as every rank must make it.
struct Signature {
  int64_t op = 0, dtype = 0, arg = 0, count = 0;
  bool operator==(const Signature&) const = default;
};
constexpr const char* kOpNames[] = {"", "all_reduce", "reduce_scatter", "all_gather", "all_to_allv", "broadcast",
                                    "barrier"};

std::string describe_call(const Signature& s) {
  return fmt::format("{}({} {}, {})", kOpNames[s.op], s.count, dtype_name(static_cast<DType>(s.dtype)),
                     s.op == 5 ? fmt::format("root {}", s.arg) : fmt::format("op {}", s.arg));
}

// A send's header: what its payload is.
struct Header {
  int64_t dtype = 0, count = 0;
};

int64_t counts_key(const std::vector<size_t>& counts) {
  int64_t h = 1469598103934665603LL;
  for (size_t c : counts) h = (h ^ static_cast<int64_t>(c)) * 1099511628211LL;
  return h;
}

// A Work that the communicator's own thread completes.
class QueuedWork final : public Work {
 public:
  Status wait() override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }
  void complete(Status s) {
    {
      std::lock_guard lock(mu_);
      status_ = std::move(s);
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

class EmuNccl final : public Communicator, public std::enable_shared_from_this<EmuNccl> {
 public:
  EmuNccl(comm::GroupSpec spec, int rank, std::unique_ptr<Communicator> data, std::unique_ptr<Communicator> side)
      : spec_(std::move(spec)), data_(std::move(data)), side_(std::move(side)) {
    rank_ = rank;
    thread_ = std::thread([this] { run(); });
  }
  ~EmuNccl() override {
    {
      std::lock_guard lock(q_mu_);
      stopping_ = true;
    }
    q_cv_.notify_all();
    thread_.join();
  }

  const char* backend() const override { return "nccl (emulated)"; }
  const comm::GroupSpec& group() const override { return spec_; }
  Memory memory() const override { return Memory::kDevice; }

  WorkHandle all_reduce(const Buffer& data, ReduceOp op) override {
    Buffer h;
    if (Status s = host("all_reduce", data, &h); !s) return comm::finished_work(s);
    return collective("all_reduce", {1, static_cast<int64_t>(data.dtype), static_cast<int64_t>(op),
                                     static_cast<int64_t>(data.count)},
                      [this, h, op] { return data_->all_reduce(h, op); });
  }

  WorkHandle reduce_scatter(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts,
                            ReduceOp op) override {
    Buffer hi, ho;
    if (Status s = pair("reduce_scatter", in, out, &hi, &ho); !s) return comm::finished_work(s);
    return collective("reduce_scatter", {2, static_cast<int64_t>(in.dtype), static_cast<int64_t>(op),
                                         counts_key(counts)},
                      [this, hi, ho, counts, op] { return data_->reduce_scatter(hi, ho, counts, op); });
  }

  WorkHandle all_gather(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts) override {
    Buffer hi, ho;
    if (Status s = pair("all_gather", in, out, &hi, &ho); !s) return comm::finished_work(s);
    return collective("all_gather", {3, static_cast<int64_t>(in.dtype), 0, counts_key(counts)},
                      [this, hi, ho, counts] { return data_->all_gather(hi, ho, counts); });
  }

  WorkHandle all_to_allv(const Buffer& in, const std::vector<size_t>& send_counts, const Buffer& out,
                         const std::vector<size_t>& recv_counts) override {
    Buffer hi, ho;
    if (Status s = pair("all_to_allv", in, out, &hi, &ho); !s) return comm::finished_work(s);
    return collective("all_to_allv", {4, static_cast<int64_t>(in.dtype), 0, 0},
                      [this, hi, ho, send_counts, recv_counts] {
                        return data_->all_to_allv(hi, send_counts, ho, recv_counts);
                      });
  }

  WorkHandle broadcast(const Buffer& data, int root) override {
    Buffer h;
    if (Status s = host("broadcast", data, &h); !s) return comm::finished_work(s);
    return collective("broadcast", {5, static_cast<int64_t>(data.dtype), root, static_cast<int64_t>(data.count)},
                      [this, h, root] { return data_->broadcast(h, root); });
  }

  WorkHandle barrier() override {
    return collective("barrier", {6, 0, 0, 0}, [this] { return data_->barrier(); });
  }

  WorkHandle batch_send_recv(const std::vector<P2pOp>& ops) override;

  void abort(const std::string& reason) override {
    data_->abort(reason);
    side_->abort(reason);
  }

 private:
  // One posted receive: its header is on the way; its payload is received when it is waited
  // for (or when a later receive from the same peer is).
  struct PendingRecv {
    Buffer host;
    Header header;
    WorkHandle header_work, payload;
    Status status;
    bool posted = false;
  };
  friend class P2pWork;

  // A device buffer's backing as a host buffer; invalid for anything NCCL would refuse.
  Status host(const char* op, const Buffer& b, Buffer* out) const {
    PARTRAIN_RETURN_IF_ERROR(check_buffer(op, b));
    *out = Buffer{nullptr, b.dtype, b.count, Memory::kHost};
    if (b.count == 0) return Status::ok();
    Result<void*> h = DeviceArena::get().host_of(b.data, b.bytes(), b.dtype, fmt::format("{} on {}", op, describe()));
    if (!h) return h.status();
    out->data = *h;
    return Status::ok();
  }
  Status pair(const char* op, const Buffer& in, const Buffer& out, Buffer* hi, Buffer* ho) const {
    PARTRAIN_RETURN_IF_ERROR(host(op, in, hi));
    return host(op, out, ho);
  }

  // A collective: its signature gathered now; on this communicator's thread, in the order
  // started, the signatures compared and only then the data moved (a mismatch would make
  // Gloo's transport abort the process, as NCCL would hang).
  WorkHandle collective(const char* what, Signature mine, std::function<WorkHandle()> start_data) {
    auto all = std::make_shared<std::vector<Signature>>(static_cast<size_t>(size()));
    auto sig = std::make_shared<Signature>(mine);
    WorkHandle gathered = side_->all_gather(Buffer{sig.get(), DType::kI32, 8, Memory::kHost},
                                            Buffer{all->data(), DType::kI32, 8 * all->size(), Memory::kHost},
                                            std::vector<size_t>(all->size(), 8));
    auto work = std::make_shared<QueuedWork>();
    const std::string op = fmt::format("{} on {}", what, describe());
    push([this, op, sig, all, gathered, start_data, work] {
      Status s = gathered->wait();
      for (size_t r = 0; s && r < all->size(); ++r) {
        if ((*all)[r] == *sig) continue;
        s = Status::invalid(fmt::format("{}: rank {} calls {} where this rank calls {}; NCCL needs every rank of the "
                                        "group to make the same collective calls (dtype, counts, root) in the same "
                                        "order", op, r, describe_call((*all)[r]), describe_call(*sig)));
      }
      if (s) s = start_data()->wait();
      work->complete(std::move(s));
    });
    return work;
  }

  void push(std::function<void()> task) {
    {
      std::lock_guard lock(q_mu_);
      queue_.push_back(std::move(task));
    }
    q_cv_.notify_all();
  }
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lock(q_mu_);
        q_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  // Receives the payload of every pending receive from `peer` up to and including `upto`,
  // in issue order (each after its header was checked).
  Status post_payloads(int peer, const std::shared_ptr<PendingRecv>& upto) {
    std::lock_guard lock(p2p_mu_);
    std::deque<std::shared_ptr<PendingRecv>>& q = pending_[peer];
    while (!upto->posted && !q.empty()) {
      std::shared_ptr<PendingRecv> r = q.front();
      q.pop_front();
      r->posted = true;
      r->status = r->header_work->wait();
      if (r->status && (r->header.dtype != static_cast<int64_t>(r->host.dtype) ||
                        r->header.count != static_cast<int64_t>(r->host.count))) {
        r->status = Status::invalid(fmt::format(
            "recv on {}: this receive from rank {} expects {} {} elements, but the message rank {} sent in its "
            "place (the next in issue order) holds {} {}: NCCL matches point-to-point messages in the order they "
            "were issued, never by tag; issue sends and receives in the same order on both ranks",
            describe(), peer, r->host.count, dtype_name(r->host.dtype), peer, r->header.count,
            dtype_name(static_cast<DType>(r->header.dtype))));
        abort(r->status.message());  // the peer's payload would never be received
      }
      if (r->status) r->payload = data_->recv(r->host, peer);
    }
    return upto->status;
  }

  comm::GroupSpec spec_;
  std::unique_ptr<Communicator> data_, side_;
  std::mutex q_mu_;
  std::condition_variable q_cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
  std::mutex p2p_mu_;
  std::map<int, std::deque<std::shared_ptr<PendingRecv>>> pending_;
};

// Sends: header and payload posted at once. Receives: header posted; payload on wait.
class P2pWork final : public Work {
 public:
  struct Entry {
    bool is_send;
    int peer;
    std::shared_ptr<Header> header;  // sends: what was announced
    WorkHandle header_work, payload;
    std::shared_ptr<EmuNccl::PendingRecv> recv;
  };
  P2pWork(std::shared_ptr<EmuNccl> owner, std::vector<Entry> entries)
      : owner_(std::move(owner)), entries_(std::move(entries)) {}
  Status wait() override {
    std::lock_guard lock(mu_);
    if (done_) return status_;
    done_ = true;
    // Receives first post their payloads (a send completes only once its peer receives: an
    // exchange's two sends would otherwise wait for each other), then everything is waited.
    for (Entry& e : entries_) {
      if (!e.is_send && status_) status_ = owner_->post_payloads(e.peer, e.recv);
    }
    for (Entry& e : entries_) {
      Status s;
      if (e.is_send) {
        s = e.header_work->wait();
        if (s) s = e.payload->wait();
      } else if (e.recv->payload) {
        s = e.recv->payload->wait();
      }
      if (status_) status_ = s;
    }
    return status_;
  }

 private:
  std::shared_ptr<EmuNccl> owner_;
  std::vector<Entry> entries_;
  std::mutex mu_;
  bool done_ = false;
  Status status_;
};

WorkHandle EmuNccl::batch_send_recv(const std::vector<P2pOp>& ops) {
  std::vector<P2pWork::Entry> entries;
  std::vector<Buffer> hosts(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& o = ops[i];
    const char* what = o.is_send ? "send" : "recv";
    if (o.peer < 0 || o.peer >= size() || o.peer == rank_) {
      return comm::finished_work(
          Status::invalid(fmt::format("{} on {}: peer {} is not another group rank", what, describe(), o.peer)));
    }
    if (Status s = host(what, o.buf, &hosts[i]); !s) return comm::finished_work(s);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2pOp& o = ops[i];
    P2pWork::Entry e{o.is_send, o.peer, nullptr, nullptr, nullptr, nullptr};
    if (o.is_send) {
      e.header = std::make_shared<Header>(Header{static_cast<int64_t>(o.buf.dtype), static_cast<int64_t>(o.buf.count)});
      e.header_work = side_->send(Buffer{e.header.get(), DType::kI32, 4, Memory::kHost}, o.peer);
      e.payload = hosts[i].count > 0 ? data_->send(hosts[i], o.peer) : comm::finished_work(Status::ok());
    } else {
      auto r = std::make_shared<PendingRecv>();
      r->host = hosts[i];
      r->header_work = side_->recv(Buffer{&r->header, DType::kI32, 4, Memory::kHost}, o.peer);
      e.recv = r;
      std::lock_guard lock(p2p_mu_);
      pending_[o.peer].push_back(r);
    }
    entries.push_back(std::move(e));
  }
  return std::make_shared<P2pWork>(shared_from_this(), std::move(entries));
}

// The caller's handle; works hold the communicator itself (as NCCL's handle does).
class EmuNcclHandle final : public Communicator {
 public:
  explicit EmuNcclHandle(std::shared_ptr<EmuNccl> impl) : impl_(std::move(impl)) { rank_ = impl_->rank(); }
  ~EmuNcclHandle() override = default;
  const char* backend() const override { return impl_->backend(); }
  const comm::GroupSpec& group() const override { return impl_->group(); }
  Memory memory() const override { return Memory::kDevice; }
  WorkHandle all_reduce(const Buffer& d, ReduceOp op) override { return impl_->all_reduce(d, op); }
  WorkHandle reduce_scatter(const Buffer& in, const Buffer& out, const std::vector<size_t>& c, ReduceOp op) override {
    return impl_->reduce_scatter(in, out, c, op);
  }
  WorkHandle all_gather(const Buffer& in, const Buffer& out, const std::vector<size_t>& c) override {
    return impl_->all_gather(in, out, c);
  }
  WorkHandle all_to_allv(const Buffer& in, const std::vector<size_t>& s, const Buffer& out,
                         const std::vector<size_t>& r) override {
    return impl_->all_to_allv(in, s, out, r);
  }
  WorkHandle broadcast(const Buffer& d, int root) override { return impl_->broadcast(d, root); }
  WorkHandle batch_send_recv(const std::vector<P2pOp>& ops) override { return impl_->batch_send_recv(ops); }
  WorkHandle barrier() override { return impl_->barrier(); }
  void abort(const std::string& reason) override { impl_->abort(reason); }

 private:
  std::shared_ptr<EmuNccl> impl_;
};

// NCCL's refusal of two ranks of one communicator on one device.
Status check_distinct_gpus(const comm::GroupSpec& spec, int rank, comm::RendezvousClient& store,
                           const comm::NcclOptions& o) {
  const std::string mine = device_uuid(std::max(0, o.device));
  PARTRAIN_RETURN_IF_ERROR(store.set(rdzv_keys::emu_gpu(spec.name, rank), mine));
  std::map<std::string, int> seen;
  for (size_t r = 0; r < spec.members.size(); ++r) {
    Result<std::string> id = store.get(rdzv_keys::emu_gpu(spec.name, r), o.connect_timeout);
    if (!id) return id.status();
    auto [it, fresh] = seen.emplace(*id, static_cast<int>(r));
    if (!fresh) {
      return Status::invalid(fmt::format(
          "NCCL (emulated) group '{}': ranks {} and {} are both on GPU {} (ncclInvalidUsage: Duplicate GPU "
          "detected); NCCL runs one rank of a communicator per device: give each rank its own GPU, or let ranks "
          "that share one use the staged transport", spec.name, it->second, r, *id));
    }
  }
  return Status::ok();
}

}  // namespace

std::string device_uuid(int ordinal) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr || *visible == '\0') return fmt::format("EMU-{}", ordinal);
  std::string list = visible;
  for (int i = 0; i < ordinal; ++i) {
    const size_t comma = list.find(',');
    if (comma == std::string::npos) return fmt::format("EMU-{}", ordinal);
    list = list.substr(comma + 1);
  }
  return "EMU-" + list.substr(0, list.find(','));
}

Result<std::unique_ptr<comm::Communicator>> create_emulated_nccl(const comm::GroupSpec& spec,
                                                                 comm::RendezvousClient& store,
                                                                 const comm::NcclOptions& options) {
  Result<int> rank = comm::group_rank_of(spec);
  if (!rank) return rank.status();
  PARTRAIN_RETURN_IF_ERROR(check_distinct_gpus(spec, *rank, store, options));
  comm::GlooOptions g;
  g.host = options.host;
  g.timeout = options.timeout;
  g.connect_timeout = options.connect_timeout;
  Result<std::unique_ptr<Communicator>> data = comm::create_gloo_communicator(spec, store, g);
  if (!data) return data.status();
  comm::GroupSpec side = spec;
  side.name += "~";
  Result<std::unique_ptr<Communicator>> signatures = comm::create_gloo_communicator(side, store, g);
  if (!signatures) return signatures.status();
  auto impl = std::make_shared<EmuNccl>(spec, *rank, std::move(data).value(), std::move(signatures).value());
  log::debug("comm", "emulated NCCL communicator '{}' ready: rank {} of {}", spec.name, *rank, spec.members.size());
  return std::unique_ptr<Communicator>(std::make_unique<EmuNcclHandle>(std::move(impl)));
}

}  // namespace partrain::gpu::emu
