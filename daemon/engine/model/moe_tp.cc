// Mixture-of-experts blocks under tensor parallelism, with the experts whole on every tp
// rank (expert-tensor-parallel size 1, as Megatron-core recommends for fine-grained
// experts): attention and the dense MLPs stay tensor-parallel; in a MoE block each tp rank
// routes its own 1/tp of the micro-batch's N tokens, dispatches them over its ep group (the
// ep groups are per tp coordinate; without ep every expert is local) and gets their outputs
// back. Splitting the experts by tp too would cut their small GEMMs tp ways and send every
// token's row to the ep group once per tp rank; splitting the tokens keeps each GEMM whole
// and each row sent once.
//
//   tokens    rank r holds tokens [r N/tp, (r+1) N/tp) (N = B*T, flattened): under sequence
//             parallelism exactly its residual rows; without, its slice of the replicated
//             norm output, and the outputs (and, in backward, the input gradients) are
//             all-gathered over tp so every rank has all N rows again;
//   routing   exactly one rank's: capacity is per micro-batch over all N tokens in token
//             order, so rank r starts from what ranks 0..r-1 admitted. Admission per expert
//             only depends on how many earlier choices picked it (min(cap, earlier choices)
//             were kept), so an all-gather of the per-expert choice counts suffices; the aux
//             loss takes the micro-batch's choice counts and mean probabilities (the same
//             all-gather carries each rank's probability sums, a double as two floats);
//   gradients each tp rank's router and experts saw different tokens: their gradients
//             (ParamSpec::tp_summed) are summed over tp once per step by the worker.
//
// Worked example: tp2, N = 8 tokens, E = 2, top-1, capacity 2: rank 0 routes tokens 0-3 and
// picks experts 0,0,0,1; rank 1 tokens 4-7 picks 1,1,0,0. Rank 1 learns rank 0 chose expert
// 0 three times (min(2, 3) = 2 kept: full) and expert 1 once (1 kept): it keeps token 4 for
// expert 1 and drops 5, 6 and 7, as one rank admitting tokens 0..7 in order does.
#include <algorithm>

#include "engine/model/model.h"
#include "engine/model/model_internal.h"

namespace partrain::engine::model {

Status Model::moe_tp_allocate() {
  if (tp_.size == 1 || tp_.sp || o_.moe_experts == 0) return Status::ok();
  // Without sp: this rank's rows of a MoE block's output (and of its input gradient) before
  // they are all-gathered.
  const int64_t rows = static_cast<int64_t>(max_batch_) * T_ / tp_.size;
  return alloc_to(MemCategory::kWorkspace, be_->act_dtype(), {rows, o_.hidden}, &moe_rows_);
}

void Model::moe_exchange_choices(MoeState& s) {
  const int E = o_.moe_experts;
  std::fill(s.admitted_before.begin(), s.admitted_before.end(), 0);
  if (!regions_.active()) return;
  // Mine: the choice counts (whole numbers, exact in float) and the probability sums as a
  // float head and the float rest.
  const size_t e3 = 3 * static_cast<size_t>(E);
  host_f_.resize(e3 * static_cast<size_t>(tp_.size));
  for (size_t e = 0; e < static_cast<size_t>(E); ++e) {
    const float head = static_cast<float>(s.mean_p[e]);
    host_f_[e] = static_cast<float>(s.chosen[e]);
    host_f_[E + e] = head;
    host_f_[2 * E + e] = static_cast<float>(s.mean_p[e] - head);
  }
  be_->to_device(s.tp_mine, host_f_.data());
  regions_.comm()->all_gather(s.tp_all, s.tp_mine);
  be_->to_host(host_f_.data(), s.tp_all);
  // The micro-batch's totals, in rank order; what the earlier ranks kept of each expert.
  std::vector<double> earlier(static_cast<size_t>(E), 0.0);
  std::fill(s.chosen.begin(), s.chosen.end(), 0.0);
  std::fill(s.mean_p.begin(), s.mean_p.end(), 0.0);
  for (int r = 0; r < tp_.size; ++r) {
    const float* v = host_f_.data() + e3 * static_cast<size_t>(r);
    for (size_t e = 0; e < static_cast<size_t>(E); ++e) {
      if (r < tp_.rank) earlier[e] += v[e];
      s.chosen[e] += v[e];
      s.mean_p[e] += static_cast<double>(v[E + e]) + static_cast<double>(v[2 * E + e]);
    }
  }
  for (size_t e = 0; e < static_cast<size_t>(E); ++e) {
    s.admitted_before[e] = static_cast<int>(std::min<double>(s.cap, earlier[e]));
  }
}

void Model::moe_tp_forward(int l, MoeState& s, const Tensor& ln2, const Tensor& branch) {
  if (tp_.sp) return moe_forward(l, s, ln2, branch);  // both are this rank's rows already
  const int64_t C = o_.hidden, n = N_ / tp_.size, r0 = tp_.rank * n;
  const Tensor rows = moe_rows_.slice(0, {n, C});
  moe_forward(l, s, ln2.slice(r0 * C, {n, C}), rows);
  regions_.comm()->all_gather(branch, rows);
}

Tensor Model::moe_tp_backward(int l, MoeState& s, const Tensor& ln2, const Tensor& dbranch, const Tensor& dx) {
  const int64_t C = o_.hidden, n = N_ / tp_.size, r0 = tp_.rank * n;
  if (tp_.sp) {
    const Tensor d = dx.slice(0, {n, C});
    be_->zero(d);
    moe_backward(l, s, ln2, dbranch, d);
    return d;
  }
  const Tensor rows = moe_rows_.slice(0, {n, C});
  be_->zero(rows);
  moe_backward(l, s, ln2.slice(r0 * C, {n, C}), dbranch.slice(r0 * C, {n, C}), rows);
  const Tensor full = dx.slice(0, {N_, C});
  regions_.comm()->all_gather(full, rows);
  return full;
}

}  // namespace partrain::engine::model
