#include "comm/nccl/nccl_communicator.h"
#include "comm/rendezvous/keys.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include "common/log.h"
#include "common/progress.h"

namespace partrain::comm {
namespace {

constexpr std::string_view kLog = "comm";

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  return ncclSum;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: return ncclInt32;
  }
  return ncclFloat32;
}

// Device memory, as CUDA sees it: a pointer into cudaMalloc'ed memory (or managed memory).
bool on_device(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // an unregistered host pointer may leave an error behind
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

class NcclCommunicator;

// One enqueued operation: done when its event fires.
class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclCommunicator> owner, cudaEvent_t done, std::string what)
      : owner_(std::move(owner)), done_event_(done), what_(std::move(what)) {}
  ~NcclWork() override;
  Status wait() override;

 private:
  std::shared_ptr<NcclCommunicator> owner_;
  cudaEvent_t done_event_;
  std::string what_;
  std::mutex mu_;
  bool finished_ = false;
  Status status_;
};

class NcclCommunicator final : public Communicator, public std::enable_shared_from_this<NcclCommunicator> {
 public:
  NcclCommunicator(GroupSpec spec, int rank, NcclOptions options) : spec_(std::move(spec)), options_(options) {
    rank_ = rank;
  }

  ~NcclCommunicator() override {
    if (comm_ != nullptr && !aborted_.load()) {
      // ncclCommDestroy waits for outstanding work, which never ends after a peer failed.
      if (failed_.load()) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (ready_event_ != nullptr) cudaEventDestroy(ready_event_);
    if (barrier_scratch_ != nullptr) cudaFree(barrier_scratch_);
  }

  Status connect(RendezvousClient& store) {
    if (options_.device >= 0) PARTRAIN_RETURN_IF_ERROR(cuda("cudaSetDevice", cudaSetDevice(options_.device)));
    PARTRAIN_RETURN_IF_ERROR(cuda("cudaGetDevice", cudaGetDevice(&device_)));
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    std::string bytes;
    if (rank_ == 0) {
      PARTRAIN_RETURN_IF_ERROR(nccl("ncclGetUniqueId", ncclGetUniqueId(&id)));
      bytes.assign(reinterpret_cast<const char*>(&id), sizeof(id));
    }
    auto shared = store.share(rdzv_keys::nccl_id(spec_.name), rank_ == 0, bytes, options_.connect_timeout);
    if (!shared) return shared.status().prefixed(fmt::format("NCCL unique id of {}: ", describe()));
    if (shared->size() != sizeof(id)) {
      return Status::internal(fmt::format("NCCL unique id of {} has {} bytes, not {}", describe(), shared->size(),
                                          sizeof(id)));
    }
    std::memcpy(&id, shared->data(), sizeof(id));
    PARTRAIN_RETURN_IF_ERROR(nccl("ncclCommInitRank", ncclCommInitRank(&comm_, size(), id, rank_)));
    PARTRAIN_RETURN_IF_ERROR(cuda("cudaStreamCreate", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)));
    PARTRAIN_RETURN_IF_ERROR(
        cuda("cudaEventCreate", cudaEventCreateWithFlags(&ready_event_, cudaEventDisableTiming)));
    return Status::ok();
  }

  const char* backend() const override { return "nccl"; }
  const GroupSpec& group() const override { return spec_; }
  using Communicator::describe;
  // Operations started from now on wait for `stream` (see set_nccl_compute_stream).
  void set_compute_stream(void* stream) {
    std::lock_guard lock(launch_mu_);
    options_.compute_stream = stream;
  }
  using Communicator::all_gather;
  using Communicator::reduce_scatter;

  Memory memory() const override { return Memory::kDevice; }

  WorkHandle all_reduce(const Buffer& data, ReduceOp op) override {
    if (Status s = check_device("all_reduce", {&data}); !s) return finished_work(s);
    return launch("all_reduce", [&]() -> ncclResult_t {
      if (data.count == 0) return ncclSuccess;
      return ncclAllReduce(data.data, data.data, data.count, nccl_type(data.dtype), nccl_op(op), comm_, stream_);
    });
  }

  WorkHandle reduce_scatter(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts,
                            ReduceOp op) override {
    if (Status s = check_counts("reduce_scatter", counts); !s) return finished_work(s);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    if (Status s = check_pair("reduce_scatter", in, total, out, counts[rank_]); !s) return finished_work(s);
    bool equal = std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
    const ncclDataType_t type = nccl_type(in.dtype);
    return launch("reduce_scatter", [&]() -> ncclResult_t {
      if (equal) {
        if (counts[0] == 0) return ncclSuccess;
        return ncclReduceScatter(in.data, out.data, counts[0], type, nccl_op(op), comm_, stream_);
      }
      // Uneven shares: one reduce per share, to its owner, fused into one group.
      ncclGroupStart();
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        if (counts[r] > 0) {
          ncclResult_t rc = ncclReduce(in.slice(offset, counts[r]).data, r == rank_ ? out.data : nullptr, counts[r],
                                       type, nccl_op(op), r, comm_, stream_);
          if (rc != ncclSuccess) {
            ncclGroupEnd();
            return rc;
          }
        }
        offset += counts[r];
      }
      return ncclGroupEnd();
    });
  }

  WorkHandle all_gather(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts) override {
    if (Status s = check_counts("all_gather", counts); !s) return finished_work(s);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    if (Status s = check_pair("all_gather", in, counts[rank_], out, total); !s) return finished_work(s);
    bool equal = std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
    const ncclDataType_t type = nccl_type(in.dtype);
    return launch("all_gather", [&]() -> ncclResult_t {
      if (equal) {
        if (counts[0] == 0) return ncclSuccess;
        return ncclAllGather(in.data, out.data, counts[0], type, comm_, stream_);
      }
      // Uneven blocks: one broadcast per owner, fused into one group.
      ncclGroupStart();
      size_t offset = 0;
      for (int r = 0; r < size(); ++r) {
        if (counts[r] > 0) {
          ncclResult_t rc = ncclBroadcast(r == rank_ ? in.data : nullptr, out.slice(offset, counts[r]).data,
                                          counts[r], type, r, comm_, stream_);
          if (rc != ncclSuccess) {
            ncclGroupEnd();
            return rc;
          }
        }
        offset += counts[r];
      }
      return ncclGroupEnd();
    });
  }

  WorkHandle all_to_allv(const Buffer& in, const std::vector<size_t>& send_counts, const Buffer& out,
                         const std::vector<size_t>& recv_counts) override {
    if (Status s = check_counts("all_to_allv", send_counts); !s) return finished_work(s);
    if (Status s = check_counts("all_to_allv", recv_counts); !s) return finished_work(s);
    if (send_counts[rank_] != recv_counts[rank_]) {
      return finished_work(Status::invalid(fmt::format("all_to_allv on {}: this rank sends itself {} elements but "
                                                       "expects {}",
                                                       describe(), send_counts[rank_], recv_counts[rank_])));
    }
    const size_t send_total = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
    const size_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
    if (Status s = check_pair("all_to_allv", in, send_total, out, recv_total); !s) return finished_work(s);
    const ncclDataType_t type = nccl_type(in.dtype);
    return launch("all_to_allv", [&]() -> ncclResult_t {
      ncclGroupStart();
      size_t send_off = 0, recv_off = 0;
      for (int p = 0; p < size(); ++p) {
        ncclResult_t rc = ncclSuccess;
        if (p == rank_) {
          if (send_counts[p] > 0 &&
              cudaMemcpyAsync(out.slice(recv_off, 0).data, in.slice(send_off, 0).data,
                              send_counts[p] * dtype_size(in.dtype), cudaMemcpyDeviceToDevice, stream_) != cudaSuccess) {
            rc = ncclUnhandledCudaError;
          }
        } else {
          if (send_counts[p] > 0) rc = ncclSend(in.slice(send_off, 0).data, send_counts[p], type, p, comm_, stream_);
          if (rc == ncclSuccess && recv_counts[p] > 0) {
            rc = ncclRecv(out.slice(recv_off, 0).data, recv_counts[p], type, p, comm_, stream_);
          }
        }
        if (rc != ncclSuccess) {
          ncclGroupEnd();
          return rc;
        }
        send_off += send_counts[p];
        recv_off += recv_counts[p];
      }
      return ncclGroupEnd();
    });
  }

  WorkHandle broadcast(const Buffer& data, int root) override {
    if (root < 0 || root >= size()) {
      return finished_work(
          Status::invalid(fmt::format("broadcast on {}: root {} is not a group rank", describe(), root)));
    }
    if (Status s = check_device("broadcast", {&data}); !s) return finished_work(s);
    return launch("broadcast", [&]() -> ncclResult_t {
      if (data.count == 0) return ncclSuccess;
      return ncclBroadcast(data.data, data.data, data.count, nccl_type(data.dtype), root, comm_, stream_);
    });
  }

  WorkHandle batch_send_recv(const std::vector<P2pOp>& ops) override {
    for (const auto& o : ops) {
      if (o.peer < 0 || o.peer >= size() || o.peer == rank_) {
        return finished_work(
            Status::invalid(fmt::format("send/recv on {}: peer {} is not another group rank", describe(), o.peer)));
      }
      if (Status s = check_device(o.is_send ? "send" : "recv", {&o.buf}); !s) return finished_work(s);
    }
    return launch("send/recv", [&]() -> ncclResult_t {
      ncclGroupStart();
      for (const auto& o : ops) {
        if (o.buf.count == 0) continue;
        const ncclDataType_t type = nccl_type(o.buf.dtype);
        ncclResult_t rc = o.is_send ? ncclSend(o.buf.data, o.buf.count, type, o.peer, comm_, stream_)
                                    : ncclRecv(o.buf.data, o.buf.count, type, o.peer, comm_, stream_);
        if (rc != ncclSuccess) {
          ncclGroupEnd();
          return rc;
        }
      }
      return ncclGroupEnd();
    });
  }

  WorkHandle barrier() override {
    // NCCL has no barrier: a one-element all-reduce on a scratch value is one.
    return launch("barrier", [&]() -> ncclResult_t {
      if (barrier_scratch_ == nullptr && cudaMalloc(&barrier_scratch_, sizeof(float)) != cudaSuccess) {
        return ncclUnhandledCudaError;
      }
      return ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    });
  }

  // Takes only state_mu_, never launch_mu_: a launch stuck in NCCL (a peer that never joins
  // a group's connection setup) must not keep abort() from reaching ncclCommAbort.
  void abort(const std::string& reason) override {
    std::lock_guard lock(state_mu_);
    if (aborted_.exchange(true)) return;
    abort_reason_ = reason;
    log::warn(kLog, "aborting {}: {}", describe(), reason);
    if (comm_ != nullptr) ncclCommAbort(comm_);
  }

  // Polls until `event` fired; unavailable on abort, an NCCL async error or the timeout.
  // While it waits the rank is marked waiting (common/progress.h): blocked on its peers, so
  // the watchdog blames a silent peer that is not, as for Gloo's waits.
  Status wait_event(cudaEvent_t event, const std::string& what) {
    auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    std::optional<progress::Waiting> waiting;
    for (int spins = 0;; ++spins) {
      if (aborted_.load()) return aborted_status(what);
      cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) return Status::ok();
      if (q != cudaErrorNotReady) {
        return Status::unavailable(
            fmt::format("{} on {} failed: CUDA error {}", what, describe(), cudaGetErrorString(q)));
      }
      if (!waiting) waiting.emplace();  // not done at the first look: this wait blocks
      ncclResult_t async = ncclSuccess;
      {
        std::lock_guard lock(state_mu_);
        if (!aborted_.load()) ncclCommGetAsyncError(comm_, &async);
      }
      if (async != ncclSuccess) {
        failed_.store(true);
        return Status::unavailable(fmt::format("{} on {} failed: NCCL error {}; a peer of the group died or hung",
                                               what, describe(), ncclGetErrorString(async)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        failed_.store(true);
        return Status::unavailable(fmt::format("{} on {} did not finish within {} ms; a peer of the group hung",
                                               what, describe(), options_.timeout.count()));
      }
      if (spins < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  Status aborted_status(const std::string& what) {
    std::lock_guard lock(state_mu_);
    return Status::unavailable(fmt::format("{} on {}: communicator was aborted ({})", what, describe(), abort_reason_));
  }

 private:
  // Device buffers, checked as CUDA sees them: a host pointer is a bug of the caller.
  Status check_device(const char* op, std::initializer_list<const Buffer*> bufs) const {
    for (const Buffer* b : bufs) {
      PARTRAIN_RETURN_IF_ERROR(check_buffer(op, *b));
      if (b->count > 0 && !on_device(b->data)) {
        return Status::invalid(fmt::format("{} on {}: the {} buffer at {} is not device memory (NCCL moves only "
                                           "device memory); pass a backend tensor", op, describe(),
                                           dtype_name(b->dtype), b->data));
      }
    }
    return Status::ok();
  }

  Status check_pair(const char* op, const Buffer& in, size_t in_count, const Buffer& out, size_t out_count) const {
    PARTRAIN_RETURN_IF_ERROR(check_device(op, {&in, &out}));
    if (in.dtype != out.dtype) {
      return Status::invalid(fmt::format("{} on {}: input {} but output {}; one dtype", op, describe(),
                                         dtype_name(in.dtype), dtype_name(out.dtype)));
    }
    if (in.count != in_count || out.count != out_count) {
      return Status::invalid(fmt::format("{} on {}: buffers of {} and {} elements for counts that move {} and {}",
                                         op, describe(), in.count, out.count, in_count, out_count));
    }
    return Status::ok();
  }

  Status cuda(const char* call, cudaError_t rc) const {
    if (rc == cudaSuccess) return Status::ok();
    return Status::unavailable(fmt::format("{} for {} failed: {}", call, describe(), cudaGetErrorString(rc)));
  }

  Status nccl(const char* call, ncclResult_t rc) const {
    if (rc == ncclSuccess) return Status::ok();
    return Status::unavailable(fmt::format("{} for {} failed: {}", call, describe(), ncclGetErrorString(rc)));
  }

  // Orders the operation after the caller's compute stream, enqueues it, and returns a Work
  // that completes with its event.
  template <typename Enqueue>
  WorkHandle launch(const char* what, Enqueue&& enqueue) {
    std::lock_guard lock(launch_mu_);
    if (aborted_.load()) return finished_work(aborted_status(what));
    auto compute = static_cast<cudaStream_t>(options_.compute_stream);
    Status s = cuda("cudaEventRecord", cudaEventRecord(ready_event_, compute));
    if (s) s = cuda("cudaStreamWaitEvent", cudaStreamWaitEvent(stream_, ready_event_, 0));
    if (s) s = nccl(what, enqueue());
    cudaEvent_t done = nullptr;
    if (s) s = cuda("cudaEventCreate", cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    if (s) s = cuda("cudaEventRecord", cudaEventRecord(done, stream_));
    if (!s) {
      if (done != nullptr) cudaEventDestroy(done);
      return finished_work(s);
    }
    return std::make_shared<NcclWork>(shared_from_this(), done, what);
  }

  GroupSpec spec_;
  NcclOptions options_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_event_ = nullptr;
  float* barrier_scratch_ = nullptr;
  std::mutex launch_mu_;  // one enqueue at a time, so all ranks see the same order
  std::mutex state_mu_;   // abort_reason_, and comm_ against ncclCommAbort
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};  // an operation failed: destroy by abort
  std::string abort_reason_;
};

NcclWork::~NcclWork() {
  if (done_event_ != nullptr) cudaEventDestroy(done_event_);
}

Status NcclWork::wait() {
  std::lock_guard lock(mu_);
  if (!finished_) {
    status_ = owner_->wait_event(done_event_, what_);
    finished_ = true;
  }
  return status_;
}

// Works hold a shared_ptr to their communicator; the caller's handle owns it through an
// adapter so that destroying it while works are alive stays safe.
class NcclHandle final : public Communicator {
 public:
  explicit NcclHandle(std::shared_ptr<NcclCommunicator> impl) : impl_(std::move(impl)) { rank_ = impl_->rank(); }
  const char* backend() const override { return impl_->backend(); }
  const GroupSpec& group() const override { return impl_->group(); }
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

  NcclCommunicator* impl() const { return impl_.get(); }

 private:
  std::shared_ptr<NcclCommunicator> impl_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> create_nccl_communicator(const GroupSpec& spec, RendezvousClient& store,
                                                               const NcclOptions& options) {
  auto rank = group_rank_of(spec);
  if (!rank) return rank.status();
  auto comm = std::make_shared<NcclCommunicator>(spec, *rank, options);
  PARTRAIN_RETURN_IF_ERROR(comm->connect(store));
  log::debug(kLog, "NCCL communicator '{}' ready: rank {} of {}", spec.name, *rank, spec.members.size());
  return std::unique_ptr<Communicator>(std::make_unique<NcclHandle>(std::move(comm)));
}

Status set_nccl_compute_stream(Communicator& comm, void* compute_stream) {
  auto* handle = dynamic_cast<NcclHandle*>(&comm);
  if (handle == nullptr) {
    return Status::invalid(fmt::format("group '{}' is a {} communicator, not NCCL: it has no compute stream",
                                       comm.group().name, comm.backend()));
  }
  handle->impl()->set_compute_stream(compute_stream);
  return Status::ok();
}

}  // namespace partrain::comm
