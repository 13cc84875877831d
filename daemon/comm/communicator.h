// One communicator interface for every parallel axis (tp, cp, dp, pp, ep) and every
// transport (Gloo over TCP for CPU ranks, NCCL between GPUs that each rank has to itself, the
// host-staged transport for ranks sharing one GPU: worker/transports.h picks one per group).
//
// A communicator serves one layout group: the global ranks `members` (in the order the
// layout core lists them) of which the caller is `global_rank`. Inside the communicator a
// rank is its position in `members` (the "group rank"); every root, peer and per-rank count
// below is indexed by group rank. Example: members {1, 3} on global rank 3 gives rank() 1,
// size() 2, and broadcast(..., root = 0) sends from global rank 1.
//
// Typed buffers: every call names its element type (f32, bf16, i32), its count in elements
// of that type, and where the memory lives (host or device). A transport takes only the
// memory it moves (memory(): Gloo host, NCCL and the staged transport device) and refuses
// anything else with invalid, naming the group, the call and the fix: a host pointer handed
// to a device transport is a bug the caller must fix, never something to copy around.
// Reductions of bf16 accumulate in fp32 where the transport can (Gloo, staged); NCCL reduces
// bf16 natively. Counts of per-rank variants (counts[r]) are in elements too.
//
// Every operation starts asynchronously and returns a Work; wait() on it before touching the
// buffers again. Operations of one communicator run in the order they were started, so two
// may be outstanding while the caller computes. Point-to-point messages between two ranks
// match in the order they were issued (NCCL's rule), never by tag.
//
// No exception leaves this interface: backend failures (a dead peer, a timeout, abort())
// come back from wait() as Status::unavailable naming the group and operation.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace partrain::comm {

enum class ReduceOp { kSum, kAvg, kMax };

const char* reduce_op_name(ReduceOp op);

// Where a buffer's memory lives: host memory, or the rank's GPU.
enum class Memory : uint8_t { kHost, kDevice };
const char* memory_name(Memory m);

// A typed buffer: `count` elements of `dtype` at `data`, in `memory`.
struct Buffer {
  void* data = nullptr;
  DType dtype = DType::kF32;
  size_t count = 0;
  Memory memory = Memory::kHost;
  size_t bytes() const { return count * dtype_size(dtype); }
  // The elements [offset, offset + n) of this buffer, same type and memory.
  Buffer slice(size_t offset, size_t n) const {
    return Buffer{static_cast<char*>(data) + offset * dtype_size(dtype), dtype, n, memory};
  }
};
inline Buffer host_f32(float* data, size_t count) { return Buffer{data, DType::kF32, count, Memory::kHost}; }
inline Buffer host_f32(const float* data, size_t count) {
  return host_f32(const_cast<float*>(data), count);
}

// The handle of one started operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation finished; its result. May be called again (same result).
  virtual Status wait() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// A Work that is already finished, for operations that fail validation or need no peers.
WorkHandle finished_work(Status status);

// Who is in the group and how to find the others.
struct GroupSpec {
  // Unique per job and per group, e.g. "tp0", "dp3": it namespaces the rendezvous keys, so
  // two groups with the same members (tp=1 layouts) stay apart. Required.
  std::string name;
  // Global ranks of the group, in group-rank order. Required, no duplicates.
  std::vector<int> members;
  // This process's global rank; must be in `members`.
  int global_rank = -1;
};

// Checks the spec and returns the caller's group rank; invalid naming the group otherwise.
Result<int> group_rank_of(const GroupSpec& spec);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const char* backend() const = 0;
  virtual const GroupSpec& group() const = 0;
  // Where this transport's buffers live (kHost: Gloo; kDevice: NCCL, staged).
  virtual Memory memory() const = 0;
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(group().members.size()); }

  // In place: data[i] becomes op over all ranks' data[i]. kAvg divides the sum by size().
  virtual WorkHandle all_reduce(const Buffer& data, ReduceOp op) = 0;

  // `in` holds sum(counts) elements on every rank; rank r receives, into `out` (counts[r]
  // elements), the counts[r] elements at offset counts[0] + ... + counts[r-1], reduced over
  // all ranks. counts has size() entries and may be uneven (ZeRO partitions that do not
  // divide evenly). in and out share one dtype and memory.
  virtual WorkHandle reduce_scatter(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts,
                                    ReduceOp op) = 0;

  // Rank r contributes counts[r] elements from `in` (counts[r] of them); `out` receives
  // every rank's block, in rank order (sum(counts) elements).
  virtual WorkHandle all_gather(const Buffer& in, const Buffer& out, const std::vector<size_t>& counts) = 0;

  // Rank r sends send_counts[p] elements to rank p, taken consecutively from `in` in rank
  // order, and receives recv_counts[p] elements from rank p into `out`, in rank order.
  // send_counts[p] on rank r must equal recv_counts[r] on rank p (the caller's contract,
  // e.g. exchanged by a prior all_to_all of the counts).
  virtual WorkHandle all_to_allv(const Buffer& in, const std::vector<size_t>& send_counts, const Buffer& out,
                                 const std::vector<size_t>& recv_counts) = 0;

  // Copies root's data to every rank.
  virtual WorkHandle broadcast(const Buffer& data, int root) = 0;

  // Point to point: sends and recvs started together (NCCL: one group); one Work for all
  // of them. The k-th message rank a sends to rank b matches the k-th receive b posts from a
  // (issue order, per ordered pair); a send and its recv agree on dtype and count. A lone
  // blocking send on NCCL waits for its recv, so exchanges (everyone sends and receives)
  // start as one batch.
  struct P2pOp {
    bool is_send = true;
    Buffer buf;  // read for a send, written for a recv
    int peer = 0;
  };
  virtual WorkHandle batch_send_recv(const std::vector<P2pOp>& ops) = 0;
  WorkHandle send(const Buffer& data, int peer) { return batch_send_recv({P2pOp{true, data, peer}}); }
  WorkHandle recv(const Buffer& data, int peer) { return batch_send_recv({P2pOp{false, data, peer}}); }

  virtual WorkHandle barrier() = 0;

  // Makes every outstanding and future operation fail promptly with unavailable, and
  // closes the connections so that peers blocked on us fail too. The agent calls it when a
  // peer dies. Safe to call from any thread, more than once.
  virtual void abort(const std::string& reason) = 0;

  // ---- float32 in this transport's memory() (the common case, kept short) ----------------
  WorkHandle all_reduce(float* data, size_t count, ReduceOp op) { return all_reduce(f32(data, count), op); }
  WorkHandle reduce_scatter(const float* in, float* out, const std::vector<size_t>& counts, ReduceOp op);
  // Equal shares: `in` holds size() * count elements, `out` receives count.
  WorkHandle reduce_scatter(const float* in, float* out, size_t count, ReduceOp op);
  WorkHandle all_gather(const float* in, float* out, const std::vector<size_t>& counts);
  // Equal shares: count from each rank, size() * count in `out`.
  WorkHandle all_gather(const float* in, float* out, size_t count);
  WorkHandle all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                         const std::vector<size_t>& recv_counts);
  WorkHandle broadcast(float* data, size_t count, int root) { return broadcast(f32(data, count), root); }
  WorkHandle send(const float* data, size_t count, int peer) { return send(f32(data, count), peer); }
  WorkHandle recv(float* data, size_t count, int peer) { return recv(f32(data, count), peer); }
  // A float32 buffer in this transport's memory.
  Buffer f32(const float* data, size_t count) const {
    return Buffer{const_cast<float*>(data), DType::kF32, count, memory()};
  }

 protected:
  // Checks shared by every transport; invalid naming `op`, the group and the fix, or ok.
  // The buffer is this transport's memory, its data non-null when it has elements.
  Status check_buffer(const char* op, const Buffer& b) const;
  // counts has one entry per rank.
  Status check_counts(const char* op, const std::vector<size_t>& counts) const;
  // The group for messages: "group 'tp0' (members [0,1], rank 1 of 2)".
  std::string describe() const;

  int rank_ = 0;
};

}  // namespace partrain::comm
