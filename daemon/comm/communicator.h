// One communicator interface for every parallel axis (tp, dp, pp, ep) and every backend
// (Gloo over TCP for CPU ranks, NCCL for GPUs).
//
// A communicator serves one layout group: the global ranks `members` (in the order the
// layout core lists them) of which the caller is `global_rank`. Inside the communicator a
// rank is its position in `members` (the "group rank"); every root, peer and per-rank count
// below is indexed by group rank. Example: members {1, 3} on global rank 3 gives rank() 1,
// size() 2, and broadcast(..., root = 0) sends from global rank 1.
//
// Every operation starts asynchronously and returns a Work; wait() on it before touching the
// buffers again. Operations of one communicator run in the order they were started, so two
// may be outstanding while the caller computes. Buffers hold float32 and live where the
// backend expects them: host memory for Gloo, device memory for NCCL.
//
// No exception leaves this interface: backend failures (a dead peer, a timeout, abort())
// come back from wait() as Status::unavailable naming the group and operation.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace partrain::comm {

enum class ReduceOp { kSum, kAvg, kMax };

const char* reduce_op_name(ReduceOp op);

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
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(group().members.size()); }

  // In place: data[i] becomes op over all ranks' data[i]. kAvg divides the sum by size().
  virtual WorkHandle all_reduce(float* data, size_t count, ReduceOp op) = 0;

  // `in` holds sum(counts) elements on every rank; rank r receives, into `out`, the counts[r]
  // elements at offset counts[0] + ... + counts[r-1], reduced over all ranks. counts has
  // size() entries and may be uneven (ZeRO partitions that do not divide evenly).
  virtual WorkHandle reduce_scatter(const float* in, float* out, const std::vector<size_t>& counts,
                                    ReduceOp op) = 0;
  // Equal shares: `in` holds size() * count elements, `out` receives count.
  WorkHandle reduce_scatter(const float* in, float* out, size_t count, ReduceOp op);

  // Rank r contributes counts[r] elements from `in`; `out` receives every rank's block, in
  // rank order (sum(counts) elements).
  virtual WorkHandle all_gather(const float* in, float* out, const std::vector<size_t>& counts) = 0;
  // Equal shares: count from each rank, size() * count in `out`.
  WorkHandle all_gather(const float* in, float* out, size_t count);

  // Rank r sends send_counts[p] elements to rank p, taken consecutively from `in` in rank
  // order, and receives recv_counts[p] elements from rank p into `out`, in rank order.
  // send_counts[p] on rank r must equal recv_counts[r] on rank p (the caller's contract,
  // e.g. exchanged by a prior all_to_all of the counts).
  virtual WorkHandle all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                                 const std::vector<size_t>& recv_counts) = 0;

  // Copies root's data[0..count) to every rank.
  virtual WorkHandle broadcast(float* data, size_t count, int root) = 0;

  // Point to point. A send and its recv must agree on count. Gloo matches messages between
  // two ranks per `tag`, in order; NCCL ignores the tag and matches in issue order, and a
  // lone blocking send on NCCL waits for its recv. Portable code therefore issues the
  // messages between two ranks in the same order on both sides, and starts exchanges
  // (everyone sends and receives) as one batch_send_recv.
  // A lone send or recv is a batch of one.
  WorkHandle send(const float* data, size_t count, int peer, uint32_t tag = 0) {
    return batch_send_recv({P2pOp{true, const_cast<float*>(data), count, peer, tag}});
  }
  WorkHandle recv(float* data, size_t count, int peer, uint32_t tag = 0) {
    return batch_send_recv({P2pOp{false, data, count, peer, tag}});
  }

  // Starts several sends and recvs together (NCCL: one group); one Work for all of them.
  struct P2pOp {
    bool is_send = true;
    float* data = nullptr;  // read for a send, written for a recv
    size_t count = 0;
    int peer = 0;
    uint32_t tag = 0;
  };
  virtual WorkHandle batch_send_recv(const std::vector<P2pOp>& ops) = 0;

  virtual WorkHandle barrier() = 0;

  // Makes every outstanding and future operation fail promptly with unavailable, and
  // closes the connections so that peers blocked on us fail too. The agent calls it when a
  // peer dies. Safe to call from any thread, more than once.
  virtual void abort(const std::string& reason) = 0;

 protected:
  int rank_ = 0;
};

}  // namespace partrain::comm
