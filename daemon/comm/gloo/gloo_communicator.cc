#include "comm/gloo/gloo_communicator.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/gloo/gloo_store.h"
#include "comm/rendezvous/keys.h"
#include "common/dtype.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/trace.h"

namespace partrain::comm {
namespace {

constexpr std::string_view kLog = "comm";
// Slots of point-to-point messages: a prefix no Gloo collective uses (they use 0x01-0x08).
constexpr uint64_t kP2pSlotBase = uint64_t{0x50} << 56;

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn gloo_reduce_fn(ReduceOp op) {
  if (op == ReduceOp::kMax) return static_cast<ReduceFn>(&::gloo::max<T>);
  return static_cast<ReduceFn>(&::gloo::sum<T>);
}

// The C++ type Gloo moves for `t` when nothing is reduced: the bytes of one element.
template <typename F>
void with_element(DType t, F&& f) {
  if (dtype_size(t) == 2) {
    f(uint16_t{});
  } else {
    f(uint32_t{});
  }
}

// A bf16 buffer widened to float (reductions accumulate in fp32), and narrowed back.
std::vector<float> widen(const void* data, size_t n) {
  std::vector<float> out(n);
  const auto* h = static_cast<const uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) out[i] = from_bf16(h[i]);
  return out;
}
void narrow(const float* in, size_t n, void* data) {
  auto* h = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) h[i] = to_bf16(in[i]);
}

// A Work completed by the worker thread.
class QueuedWork final : public Work {
 public:
  Status wait() override {
    std::unique_lock lock(mu_);
    if (!done_) {
      // Blocked on the peers: the watchdog blames a silent rank that is not (common/progress.h).
      lock.unlock();
      const progress::Waiting waiting;
      lock.lock();
      cv_.wait(lock, [&] { return done_; });
    }
    return status_;
  }
  void complete(Status status) {
    {
      std::lock_guard lock(mu_);
      status_ = std::move(status);
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

// Makes every pending operation of a Gloo TCP context fail now. Gloo has no public abort,
// but a receive wait that times out tells the whole transport context to fail every pair
// and every pending buffer; an unposted buffer with a 1 ms wait triggers exactly that.
void poison_context(::gloo::Context* ctx) {
  if (ctx == nullptr) return;
  char byte = 0;
  try {
    auto buf = ctx->createUnboundBuffer(&byte, 1);
    buf->waitRecv(std::chrono::milliseconds(1));
  } catch (const std::exception&) {
    // Expected: the timeout we provoked.
  }
}

// An address Gloo can bind to; unavailable naming it otherwise.
Status check_resolvable(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc == 0) return Status::ok();
  return Status::unavailable(fmt::format("this rank's address '{}' cannot be resolved ({}); give the "
                                         "node a resolvable NodeAddr in slurm.conf or DNS",
                                         host, ::gai_strerror(rc)));
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(GroupSpec spec, int rank, GlooOptions options)
      : spec_(std::move(spec)), options_(std::move(options)) {
    rank_ = rank;
  }

  ~GlooCommunicator() override {
    bool busy;
    {
      std::lock_guard lock(mu_);
      busy = running_ || !queue_.empty();
      stopping_ = true;
    }
    // Joining a worker stuck in a collective would block until its timeout: abort first.
    if (busy) abort("communicator destroyed with operations outstanding");
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  Status connect(RendezvousClient& store) {
    if (size() == 1) {
      start_worker();
      return Status::ok();
    }
    try {
      ::gloo::transport::tcp::attr attr;
      attr.hostname = options_.host;
      if (attr.hostname.empty()) {
        char name[256] = {0};
        ::gethostname(name, sizeof(name) - 1);
        attr.hostname = name;
      }
      // Gloo dereferences a failed lookup (a crash, not an exception): check it here.
      if (Status s = check_resolvable(attr.hostname); !s) return s;
      device_ = ::gloo::transport::tcp::CreateDevice(attr);
      ctx_ = mesh(store, "main");
      rs_ctx_ = mesh(store, "rs");
    } catch (const std::exception& e) {
      return Status::unavailable(fmt::format("cannot connect {}: {}; check that every member started and "
                                             "that this host's address is reachable (GlooOptions::host)",
                                             describe(), e.what()));
    }
    start_worker();
    return Status::ok();
  }

  const char* backend() const override { return "gloo"; }
  const GroupSpec& group() const override { return spec_; }
  using Communicator::all_gather;
  using Communicator::reduce_scatter;

  Memory memory() const override { return Memory::kHost; }

  WorkHandle all_reduce(const Buffer& data, ReduceOp op) override {
    if (Status st = check_reduce("all_reduce", data, op); !st) return finished_work(st);
    return enqueue("all_reduce", [this, data, op] {
      if (size() == 1 || data.count == 0) return;
      if (data.dtype == DType::kI32) {
        all_reduce_typed(static_cast<int32_t*>(data.data), data.count, op);
      } else if (data.dtype == DType::kF32) {
        all_reduce_typed(static_cast<float*>(data.data), data.count, op);
      } else {
        std::vector<float> wide = widen(data.data, data.count);
        all_reduce_typed(wide.data(), wide.size(), op);
        narrow(wide.data(), wide.size(), data.data);
      }
    });
  }

  WorkHandle reduce_scatter(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts,
                            ReduceOp op) override {
    if (Status s = check_counts("reduce_scatter", counts); !s) return finished_work(s);
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    if (Status s = check_pair("reduce_scatter", in, total, out, counts[rank_]); !s) return finished_work(s);
    if (Status s = check_reduce("reduce_scatter", out, op); !s) return finished_work(s);
    if (total > static_cast<size_t>(INT_MAX) / sizeof(float)) {
      return invalid("reduce_scatter", fmt::format("{} elements exceed Gloo's limit of {}", total,
                                                  static_cast<size_t>(INT_MAX) / sizeof(float)));
    }
    size_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, size_t{0});
    return enqueue("reduce_scatter", [this, in, out, counts, op, total, offset] {
      const size_t mine = counts[rank_];
      if (size() == 1 || total == 0) {
        if (mine > 0) std::memmove(out.data, in.slice(offset, mine).data, out.bytes());
        return;
      }
      if (in.dtype == DType::kI32) {
        std::vector<int32_t> work(static_cast<const int32_t*>(in.data), static_cast<const int32_t*>(in.data) + total);
        reduce_scatter_typed(work, counts, op);
        if (mine > 0) std::memcpy(out.data, work.data(), out.bytes());
        return;
      }
      std::vector<float> work = in.dtype == DType::kF32
                                    ? std::vector<float>(static_cast<const float*>(in.data),
                                                         static_cast<const float*>(in.data) + total)
                                    : widen(in.data, total);
      reduce_scatter_typed(work, counts, op);
      if (op == ReduceOp::kAvg) divide(work.data(), mine);
      if (mine == 0) return;
      if (out.dtype == DType::kF32) {
        std::memcpy(out.data, work.data(), out.bytes());
      } else {
        narrow(work.data(), mine, out.data);
      }
    });
  }

  WorkHandle all_gather(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts) override {
    if (Status s = check_counts("all_gather", counts); !s) return finished_work(s);
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    if (Status s = check_pair("all_gather", in, counts[rank_], out, total); !s) return finished_work(s);
    bool equal = std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
    return enqueue("all_gather", [this, in, out, counts, total, equal] {
      if (total == 0) return;
      if (size() == 1) {
        std::memmove(out.data, in.data, out.bytes());
        return;
      }
      with_element(in.dtype, [&](auto t) {
        using T = decltype(t);
        auto* input = static_cast<T*>(in.data);  // Gloo only reads it
        auto* output = static_cast<T*>(out.data);
        if (equal) {
          ::gloo::AllgatherOptions o(ctx_);
          o.setInput(input, counts[0]);
          o.setOutput(output, total);
          o.setTimeout(options_.timeout);
          ::gloo::allgather(o);
        } else {
          ::gloo::AllgathervOptions o(ctx_);
          o.setInput(input, counts[rank_]);
          o.setOutput(output, counts);
          o.setTimeout(options_.timeout);
          ::gloo::allgatherv(o);
        }
      });
    });
  }

  WorkHandle all_to_allv(const Buffer& in, const std::vector<size_t>& send_counts, const Buffer& out,
                         const std::vector<size_t>& recv_counts) override {
    if (Status s = check_counts("all_to_allv", send_counts); !s) return finished_work(s);
    if (Status s = check_counts("all_to_allv", recv_counts); !s) return finished_work(s);
    if (send_counts[rank_] != recv_counts[rank_]) {
      return invalid("all_to_allv", fmt::format("this rank sends itself {} elements but expects {}",
                                               send_counts[rank_], recv_counts[rank_]));
    }
    size_t send_total = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
    size_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
    if (Status s = check_pair("all_to_allv", in, send_total, out, recv_total); !s) return finished_work(s);
    return enqueue("all_to_allv", [this, in, out, send_counts, recv_counts, send_total, recv_total] {
      if (size() == 1) {
        if (send_total > 0) std::memmove(out.data, in.data, in.bytes());
        return;
      }
      with_element(in.dtype, [&](auto t) {
        using T = decltype(t);
        // Gloo wants a real buffer even for zero elements.
        T dummy_in{}, dummy_out{};
        ::gloo::AlltoallvOptions o(ctx_);
        o.setInput(send_total > 0 ? static_cast<T*>(in.data) : &dummy_in,
                   std::vector<int64_t>(send_counts.begin(), send_counts.end()));
        o.setOutput(recv_total > 0 ? static_cast<T*>(out.data) : &dummy_out,
                    std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
        o.setTimeout(options_.timeout);
        ::gloo::alltoallv(o);
      });
    });
  }

  WorkHandle broadcast(const Buffer& data, int root) override {
    if (root < 0 || root >= size()) return invalid("broadcast", fmt::format("root {} is not a group rank", root));
    if (Status s = check_buffer("broadcast", data); !s) return finished_work(s);
    return enqueue("broadcast", [this, data, root] {
      if (size() == 1 || data.count == 0) return;
      with_element(data.dtype, [&](auto t) {
        using T = decltype(t);
        ::gloo::BroadcastOptions o(ctx_);
        o.setOutput(static_cast<T*>(data.data), data.count);
        o.setRoot(root);
        o.setTimeout(options_.timeout);
        ::gloo::broadcast(o);
      });
    });
  }

  WorkHandle batch_send_recv(const std::vector<P2pOp>& ops) override {
    for (const auto& o : ops) {
      const char* op = o.is_send ? "send" : "recv";
      if (o.peer < 0 || o.peer >= size() || o.peer == rank_) {
        return invalid(op, fmt::format("peer {} is not another group rank", o.peer));
      }
      if (Status st = check_buffer(op, o.buf); !st) return finished_work(st);
    }
    auto work = std::make_shared<PointToPointWork>(this);
    PointToPointWork* raw = work.get();
    push(Task{"send/recv",
              [this, raw, ops] {
                for (const auto& o : ops) {
                  if (o.buf.count == 0) continue;
                  PointToPointWork::Entry e;
                  e.is_send = o.is_send;
                  e.peer = o.peer;
                  e.buffer = ctx_->createUnboundBuffer(o.buf.data, o.buf.bytes());
                  // One slot: messages between two ranks match in issue order, as NCCL's do.
                  const uint64_t slot = kP2pSlotBase;
                  if (o.is_send) {
                    e.buffer->send(o.peer, slot);
                  } else {
                    e.buffer->recv(o.peer, slot);
                  }
                  raw->entries_.push_back(std::move(e));
                }
              },
              work->posted_});
    return work;
  }

  WorkHandle barrier() override {
    return enqueue("barrier", [this] {
      if (size() == 1) return;
      ::gloo::BarrierOptions o(ctx_);
      o.setTimeout(options_.timeout);
      ::gloo::barrier(o);
    });
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      abort_reason_ = reason;
    }
    log::warn(kLog, "aborting {}: {}", describe(), reason);
    poison_context(ctx_.get());
    poison_context(rs_ctx_.get());
    cv_.notify_all();
  }

 private:
  struct Task {
    std::string name;
    std::function<void()> run;
    std::shared_ptr<QueuedWork> work;
  };

  // Sends and recvs: posted by the worker in program order, completed in the caller's wait().
  class PointToPointWork final : public Work {
   public:
    struct Entry {
      std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;  // set by the worker
      bool is_send = true;
      int peer = 0;
    };
    explicit PointToPointWork(GlooCommunicator* owner) : owner_(owner) {}
    Status wait() override {
      const progress::Waiting waiting;  // on the peers: the watchdog blames one that is not
      Status posted = posted_->wait();
      std::lock_guard lock(mu_);
      if (done_) return status_;
      done_ = true;
      status_ = posted;
      for (auto& e : entries_) {
        if (!status_) break;
        if (!e.buffer) continue;
        status_ = owner_->guarded(fmt::format("{} with rank {}", e.is_send ? "send" : "recv", e.peer), [&] {
          bool completed = e.is_send ? e.buffer->waitSend(owner_->options_.timeout)
                                     : e.buffer->waitRecv(owner_->options_.timeout);
          if (!completed) throw ::gloo::IoException("aborted");
        });
      }
      entries_.clear();
      return status_;
    }
    std::shared_ptr<QueuedWork> posted_ = std::make_shared<QueuedWork>();
    std::vector<Entry> entries_;

   private:
    GlooCommunicator* owner_;
    std::mutex mu_;
    bool done_ = false;
    Status status_;
  };

  std::shared_ptr<::gloo::rendezvous::Context> mesh(RendezvousClient& store, const std::string& which) {
    auto ctx = std::make_shared<::gloo::rendezvous::Context>(rank_, size());
    ctx->setTimeout(options_.connect_timeout);
    GlooStore gloo_store(store, rdzv_keys::gloo_context(spec_.name, which), options_.connect_timeout);
    ctx->connectFullMesh(gloo_store, device_);
    ctx->setTimeout(options_.timeout);
    return ctx;
  }

  WorkHandle invalid(const char* op, const std::string& why) const {
    return finished_work(Status::invalid(fmt::format("{} on {}: {}", op, describe(), why)));
  }

  // A reduction's buffer: host memory of f32, bf16 (reduced in fp32) or i32 (no average).
  Status check_reduce(const char* op, const Buffer& b, ReduceOp rop) const {
    PARTRAIN_RETURN_IF_ERROR(check_buffer(op, b));
    if (b.dtype == DType::kI32 && rop == ReduceOp::kAvg) {
      return Status::invalid(fmt::format("{} on {}: an average of i32 elements; sum them and divide", op, describe()));
    }
    return Status::ok();
  }

  // An operation's input and output: both host memory, one dtype, the element counts it moves.
  Status check_pair(const char* op, const Buffer& in, size_t in_count, const Buffer& out, size_t out_count) const {
    PARTRAIN_RETURN_IF_ERROR(check_buffer(op, in));
    PARTRAIN_RETURN_IF_ERROR(check_buffer(op, out));
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

  template <typename T>
  void all_reduce_typed(T* data, size_t count, ReduceOp op) {
    ::gloo::AllreduceOptions o(ctx_);
    o.setOutput(data, count);
    o.setReduceFunction(gloo_reduce_fn<T>(op));
    o.setTimeout(options_.timeout);
    ::gloo::allreduce(o);
    if (op == ReduceOp::kAvg) divide(data, count);
  }

  // Halving-doubling reduces `work` in place and leaves this rank's share at its front.
  template <typename T>
  void reduce_scatter_typed(std::vector<T>& work, const std::vector<size_t>& counts, ReduceOp op) {
    std::vector<int> recv(counts.begin(), counts.end());
    const auto* fn = op == ReduceOp::kMax ? ::gloo::ReductionFunction<T>::max : ::gloo::ReductionFunction<T>::sum;
    ::gloo::ReduceScatterHalvingDoubling<T> algorithm(rs_ctx_, {work.data()}, static_cast<int>(work.size()), recv, fn);
    algorithm.run();
  }

  template <typename T>
  void divide(T* data, size_t count) const {
    const auto n = static_cast<T>(size());
    for (size_t i = 0; i < count; ++i) data[i] /= n;
  }

  // Runs `fn`, turning any Gloo exception into unavailable naming the group.
  Status guarded(const std::string& op, const std::function<void()>& fn) {
    try {
      fn();
      return Status::ok();
    } catch (const std::exception& e) {
      std::string reason;
      {
        std::lock_guard lock(mu_);
        reason = aborted_ ? "aborted (" + abort_reason_ + ")" : std::string(e.what());
      }
      return Status::unavailable(
          fmt::format("{} on {} failed: {}; a peer of the group died, hung or was aborted", op, describe(), reason));
    }
  }

  WorkHandle enqueue(std::string name, std::function<void()> run) {
    auto work = std::make_shared<QueuedWork>();
    push(Task{std::move(name), std::move(run), work});
    return work;
  }

  void push(Task task) {
    {
      std::lock_guard lock(mu_);
      if (!aborted_ && !stopping_) {
        queue_.push_back(std::move(task));
        cv_.notify_all();
        return;
      }
    }
    task.work->complete(aborted_status(task.name));
  }

  Status aborted_status(const std::string& op) {
    std::lock_guard lock(mu_);
    return Status::unavailable(fmt::format("{} on {}: communicator was aborted ({})", op, describe(),
                                           aborted_ ? abort_reason_ : "destroyed"));
  }

  void start_worker() {
    worker_ = std::thread([this] { run_worker(); });
  }

  void run_worker() {
    for (;;) {
      Task task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
      bool aborted;
      {
        std::lock_guard lock(mu_);
        aborted = aborted_;
      }
      const int64_t start_us = trace::active() ? trace::now_us() : -1;
      Status status = aborted ? aborted_status(task.name) : guarded(task.name, task.run);
      if (start_us >= 0) trace::record(task.name, trace::Lane::kComm, start_us, trace::now_us(), spec_.name);
      {
        std::lock_guard lock(mu_);
        running_ = false;
      }
      task.work->complete(std::move(status));
    }
  }

  GroupSpec spec_;
  GlooOptions options_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<::gloo::Context> ctx_;
  std::shared_ptr<::gloo::Context> rs_ctx_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool running_ = false;
  bool stopping_ = false;
  bool aborted_ = false;
  std::string abort_reason_;
  std::thread worker_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> create_gloo_communicator(const GroupSpec& spec, RendezvousClient& store,
                                                               const GlooOptions& options) {
  auto rank = group_rank_of(spec);
  if (!rank) return rank.status();
  auto comm = std::make_unique<GlooCommunicator>(spec, *rank, options);
  PARTRAIN_RETURN_IF_ERROR(comm->connect(store));
  log::debug(kLog, "gloo communicator '{}' ready: rank {} of {}", spec.name, *rank, spec.members.size());
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace partrain::comm
