// Expert parallelism inside the engine: which experts an expert-parallel rank holds, the
// all-to-all its MoE blocks need, and the bookkeeping of dispatch and combine.
//
// A model created with ExpertOptions{rank, size} holds, in every MoE block, the router
// whole and only the experts [rank * E/size, (rank+1) * E/size) (their Hugging Face names
// and initial values are the single-rank model's). Each rank routes its own micro-batch
// exactly as one rank does (top-k, capacity over all E experts, dropping in token order),
// then:
//
//   dispatch  the kept (token, expert) rows, packed by expert (token order inside each),
//             go to the rank holding the expert: one all-to-all with per-rank counts,
//             after a small all-to-all of the per-expert counts;
//   experts   each local expert runs on the rows of every source rank (one GEMM per
//             (source, expert) segment: exactly the rows one rank's expert would see);
//   combine   the outputs go back with the mirrored all-to-all and are added to the
//             tokens with their combine weights on the source rank.
// Backward mirrors it: d output rows out, d input rows back; the router's gradient stays on
// the source rank. Expert parameters' gradients then hold the contributions of every rank
// of the ep group; the worker reduces them over the ranks holding the same experts
// (the expert-data-parallel group) only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/backend.h"

namespace partrain::engine::model {

struct ExpertOptions {
  int rank = 0;  // this rank's coordinate on the ep axis. Default: 0
  int size = 1;  // expert-parallel degree; 1 = every expert local. Default: 1
};

// The first expert ep rank `rank` of `size` holds, and how many (E / size each).
inline int first_local_expert(int experts, const ExpertOptions& ep) { return ep.rank * (experts / ep.size); }
inline int local_experts(int experts, const ExpertOptions& ep) { return experts / ep.size; }

// The collectives of the expert-parallel group. Buffers are the backend's F32 tensors
// (host memory on CPU ranks). As TensorComm: calls cannot fail here; an implementation
// keeps its first error, skips the rest, and the worker reports it at the step boundary.
class ExpertComm {
 public:
  virtual ~ExpertComm() = default;
  // Rank r sends send_counts[p] elements of `in` (consecutive, in rank order) to rank p and
  // receives recv_counts[q] elements from rank q into `out`, in rank order. Counts are
  // elements; send_counts[p] on r equals recv_counts[r] on p.
  virtual void all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                           const std::vector<size_t>& recv_counts) = 0;
  // x summed over the ep group (the gradient norm's expert squares).
  virtual double sum(double x) = 0;
};

// Where the rows of one dispatch go. Built on every rank of the ep group from its own kept
// counts per (global) expert and the counts the other ranks send to its experts.
struct DispatchPlan {
  // Send side: this rank's kept rows packed by global expert; expert e's first packed row.
  std::vector<int64_t> packed_offset;  // [E]
  std::vector<size_t> send_rows;       // [size]: rows to ep rank p (its experts' counts)
  // Receive side, in receive order (source rank, then local expert): each run of rows one
  // local expert computes on.
  struct Segment {
    int source = 0;        // ep rank the rows came from
    int local_expert = 0;  // 0 .. E/size - 1
    int64_t row = 0;       // first row in the receive buffer
    int rows = 0;
  };
  std::vector<Segment> segments;       // only segments with rows > 0
  std::vector<size_t> recv_rows;       // [size]: rows from ep rank q
  int64_t sent = 0, received = 0;      // total rows
};

// `counts`: this rank's kept rows per global expert (E of them). `incoming`: for every
// source q and local expert j, the rows q sends to j, at incoming[q * E/size + j] (what the
// counts all-to-all delivers). E must be a multiple of size.
DispatchPlan plan_dispatch(const std::vector<int>& counts, const std::vector<int>& incoming, int size);

}  // namespace partrain::engine::model
