// Mixture-of-experts feed-forward: the single-rank reference the expert-parallel plugin
// must match.
//
//   router:   p[n,:] = softmax(x[n,:] @ Wr^T)                     (E experts)
//   choice:   the top-k experts of each token by p (ties: lower expert index first)
//   weights:  k > 1: renormalised over the chosen, w_j = p_j / sum_chosen p (Mixtral);
//             k = 1: w = p (Switch), so the router also learns through the LM loss
//   capacity: cap = ceil(capacity_factor * N * k / E) (at most N); tokens are admitted in
//             token order (token n's choices best first); a choice beyond an expert's
//             capacity is dropped and contributes nothing (its weight is not redistributed).
//             Under tp each rank routes its own 1/tp of the N tokens (moe_tp.cc) and starts
//             from the choices of the ranks before it, so admission is exactly this; under
//             cp (with or without tp) every rank routes all of them (moe_route).
//   output:   y[n] = sum over kept choices j of w_j * expert_j(x[n])
//   aux loss: coef * E * sum_e f_e * P_e with f_e = (choices of e) / (N k), counted before
//             dropping, and P_e = mean_n p[n,e]  (Switch Transformer; equals coef when
//             perfectly balanced)
// Routing runs on the host: it is sequential in token order and small ([N, E]). Under
// context parallelism the router logits of every cp rank's rows are gathered, so the
// micro-batch is routed as one rank routes it (capacity, token order, f_e and P_e over all
// its tokens); each rank keeps the choices of its own rows (under tp too: its 1/tp of its cp
// rank's rows), counts the rows it keeps, and cp rank 0 alone adds the aux loss (the ranks'
// loss shares sum to one rank's loss).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/model/model.h"
#include "engine/model/model_internal.h"

namespace partrain::engine::model {

Status Model::moe_allocate(int /*l*/, MoeState& s) {
  const int64_t E = o_.moe_experts, k = o_.moe_top_k, C = o_.hidden, F = o_.ffn_hidden;
  const int64_t FC = o_.arch == Arch::kGpt2 ? F : 2 * F;
  // This rank's rows (N) and the micro-batch's tokens routed together (cp ranks' rows too).
  const int64_t N = static_cast<int64_t>(max_batch_) * T_, routed = N * cp_.size;
  s.cap_max = static_cast<int>(std::min<int64_t>(
      N, static_cast<int64_t>(std::ceil(o_.moe_capacity_factor * static_cast<double>(routed * k) / E))));
  const int64_t S = E * s.cap_max;
  const DType ad = be_->act_dtype();
  using MC = MemCategory;
  struct Want { Tensor* t; MC c; DType d; Shape s; };
  const Want wants[] = {
      {&s.logits, MC::kActivations, ad, {N, E}},  {&s.idx, MC::kActivations, DType::kI32, {S}},
      {&s.gate, MC::kActivations, DType::kF32, {S}}, {&s.xin, MC::kActivations, ad, {S, C}},
      {&s.h, MC::kActivations, ad, {S, FC}},       {&s.act, MC::kActivations, ad, {S, F}},
      {&s.y, MC::kActivations, ad, {S, C}},        {&s.dgate, MC::kWorkspace, DType::kF32, {S}},
      {&s.dlogits, MC::kWorkspace, ad, {N, E}},    {&s.dy, MC::kWorkspace, ad, {s.cap_max, C}},
      {&s.dh, MC::kWorkspace, ad, {s.cap_max, FC}}, {&s.dactv, MC::kWorkspace, ad, {s.cap_max, F}},
      {&s.dxin, MC::kWorkspace, ad, {s.cap_max, C}},
  };
  for (const Want& w : wants) {
    Result<Tensor> t = alloc(w.c, w.d, w.s);
    if (!t) return t.status();
    *w.t = *t;
  }
  if (cp_.size > 1) {  // every cp rank's router logits (under tp: this cp rank's first)
    Result<Tensor> t = alloc(MC::kWorkspace, ad, {routed, E});
    if (!t) return t.status();
    s.gathered = *t;
    if (tp_.size > 1) {
      t = alloc(MC::kWorkspace, ad, {N, E});
      if (!t) return t.status();
      s.tp_logits = *t;
    }
  }
  if (ep_.size > 1) {  // the packed send side and the received rows' gradients
    const Want more[] = {
        {&s.send_idx, MC::kActivations, DType::kI32, {S}}, {&s.send_gate, MC::kActivations, DType::kF32, {S}},
        {&s.xsend, MC::kWorkspace, ad, {S, C}},           {&s.yback, MC::kActivations, ad, {S, C}},
        {&s.dyrecv, MC::kWorkspace, ad, {S, C}},          {&s.dxrecv, MC::kWorkspace, ad, {S, C}},
        {&s.counts, MC::kWorkspace, DType::kF32, {2 * E}},
    };
    for (const Want& w : more) {
      Result<Tensor> t = alloc(w.c, w.d, w.s);
      if (!t) return t.status();
      *w.t = *t;
    }
    s.host_send_idx.assign(static_cast<size_t>(S), 0);
    s.host_send_gate.assign(static_cast<size_t>(S), 0.0f);
  }
  if (tp_.size > 1 && cp_.size == 1) {  // the choice counts and probability sums exchanged over tp
    const Want more[] = {
        {&s.tp_mine, MC::kWorkspace, DType::kF32, {3 * E}},
        {&s.tp_all, MC::kWorkspace, DType::kF32, {3 * E * tp_.size}},
    };
    for (const Want& w : more) {
      Result<Tensor> t = alloc(w.c, w.d, w.s);
      if (!t) return t.status();
      *w.t = *t;
    }
  }
  s.count.assign(static_cast<size_t>(E), 0);
  s.admitted_before.assign(static_cast<size_t>(E), 0);
  s.frac.assign(static_cast<size_t>(E), 0.0);
  s.host_idx.assign(static_cast<size_t>(S), 0);
  s.host_gate.assign(static_cast<size_t>(S), 0.0f);
  return Status::ok();
}

// The routing of the micro-batch's tokens, in token order (see the top of this file); this
// rank's rows' choices, slots (packed by expert in row order) and weights, its counts.
//
// The micro-batch's M = N_ x cp tokens are routed as one rank routes them, in two ways:
//   cp > 1   every rank routes all M tokens: its N_ rows' logits (under tp first all-gathered
//            over tp, each tp rank holding rows [r N_/tp, (r+1) N_/tp)) are all-gathered
//            over cp and put back in sequence order; mine[g] is this rank's row of token g
//            or -1; admission runs inline over all M tokens. The tp exchange is not needed.
//   cp = 1   under tp each rank routes only its N_/tp rows and learns the earlier tp ranks'
//            choice counts (moe_exchange_choices, moe_tp.cc); without tp it is one rank.
// Worked example (cp2 x tp2, B = 1, seq_len 8: cp rank 0 holds positions 0,1,6,7, cp rank 1
// holds 2..5; tp rank 1 of cp rank 1 owns its local rows 2,3 = positions 4,5): the gather
// gives all 8 logits rows in position order, mine[4] = 0, mine[5] = 1, every other -1.
void Model::moe_route(int l, MoeState& s, const Tensor& logits) {
  const int E = o_.moe_experts, k = o_.moe_top_k;
  const int N = static_cast<int>(logits.shape[0]);  // this rank's rows: N_, or N_/tp under tp
  s.rows = N;
  const bool gather = cp_.size > 1;
  const bool exchange = !gather && tp_.size > 1;  // tp alone: counts exchanged over tp
  const int M = N_ * cp_.size;                     // the micro-batch's tokens
  const int routed = gather ? M : N;
  s.host_buf.resize(static_cast<size_t>(routed) * E);
  std::vector<int>& mine = s.mine;
  mine.assign(static_cast<size_t>(routed), -1);
  if (!gather) {
    be_->to_host(s.host_buf.data(), logits);
    for (int n = 0; n < N; ++n) mine[static_cast<size_t>(n)] = n;
  } else {
    Tensor local = logits;  // this cp rank's N_ rows
    if (tp_.size > 1) {
      local = s.tp_logits.slice(0, {N_, E});
      regions_.comm()->all_gather(local, logits);
    }
    const Tensor all = s.gathered.slice(0, {routed, E});
    cp_comm_->all_gather(all, local);
    s.host_gathered.resize(static_cast<size_t>(routed) * E);
    be_->to_host(s.host_gathered.data(), all);
    const int first = tp_.size > 1 ? tp_.rank * N : 0;  // this tp rank's first local row
    for (int r = 0; r < cp_.size; ++r) {
      const SeqPositions at = context_positions(o_.seq_len, r, cp_.size);
      for (int n = 0; n < N_; ++n) {
        const int g = (n / T_) * o_.seq_len + at.at(n % T_);
        std::copy_n(&s.host_gathered[(static_cast<size_t>(r) * N_ + n) * E], E, &s.host_buf[static_cast<size_t>(g) * E]);
        if (r == cp_.rank && n >= first && n < first + N) mine[static_cast<size_t>(g)] = n - first;
      }
    }
  }
  s.probs.resize(static_cast<size_t>(N) * E);
  s.choice.resize(static_cast<size_t>(N) * k);
  s.weight.resize(static_cast<size_t>(N) * k);
  s.slot.resize(static_cast<size_t>(N) * k);
  // Capacity over the micro-batch's M tokens.
  s.cap = static_cast<int>(std::min<int64_t>(
      M, static_cast<int64_t>(std::ceil(o_.moe_capacity_factor * static_cast<double>(M) * k / E))));
  std::fill(s.count.begin(), s.count.end(), 0);
  std::vector<double>& chosen = s.chosen;  // MoeState's buffers: no allocation per step
  std::vector<double>& mean_p = s.mean_p;
  std::vector<int>& order = s.order;
  std::vector<int>& admitted = s.admitted;  // per expert, over all routed tokens
  chosen.assign(static_cast<size_t>(E), 0.0);
  mean_p.assign(static_cast<size_t>(E), 0.0);
  admitted.assign(static_cast<size_t>(E), 0);
  order.resize(static_cast<size_t>(E));
  s.row_probs.resize(static_cast<size_t>(E));
  for (int g = 0; g < routed; ++g) {
    const int n = mine[static_cast<size_t>(g)];
    const float* z = &s.host_buf[static_cast<size_t>(g) * E];
    float* pr = n >= 0 ? &s.probs[static_cast<size_t>(n) * E] : s.row_probs.data();
    const float mx = *std::max_element(z, z + E);
    double sum = 0.0;
    for (int e = 0; e < E; ++e) sum += std::exp(static_cast<double>(z[e]) - mx);
    for (int e = 0; e < E; ++e) {
      pr[e] = static_cast<float>(std::exp(static_cast<double>(z[e]) - mx) / sum);
      mean_p[static_cast<size_t>(e)] += pr[e];
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return pr[a] > pr[b]; });
    double psum = 0.0;
    for (int j = 0; j < k; ++j) psum += pr[order[static_cast<size_t>(j)]];
    for (int j = 0; j < k; ++j) {
      const int e = order[static_cast<size_t>(j)];
      chosen[static_cast<size_t>(e)] += 1.0;
      // Admit in token order while the expert has room (under the tp exchange: below).
      const bool kept = !exchange && admitted[static_cast<size_t>(e)] < s.cap;
      if (kept) ++admitted[static_cast<size_t>(e)];
      if (n < 0) continue;  // another cp or tp rank's row
      const size_t cj = static_cast<size_t>(n) * k + j;
      s.choice[cj] = e;
      s.weight[cj] = k > 1 ? static_cast<float>(pr[e] / psum) : pr[e];
      if (exchange) continue;
      moe_admit(s, cj, n, kept);
    }
  }
  if (exchange) {
    // The earlier tp ranks' tokens come first in token order: their choices (and the choice
    // and probability totals the aux loss needs) are exchanged over the group.
    moe_exchange_choices(s);
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < k; ++j) {
        const size_t cj = static_cast<size_t>(n) * k + j;
        const size_t e = static_cast<size_t>(s.choice[cj]);
        moe_admit(s, cj, n, s.admitted_before[e] + s.count[e] < s.cap);
      }
    }
  }
  double aux = 0.0;
  for (int e = 0; e < E; ++e) {  // the micro-batch's totals (chosen, mean_p over its M tokens)
    s.frac[static_cast<size_t>(e)] = chosen[static_cast<size_t>(e)] / (static_cast<double>(M) * k);
    aux += s.frac[static_cast<size_t>(e)] * (mean_p[static_cast<size_t>(e)] / M);
  }
  if (!recomputing_ && batch_.train) {
    if (cp_.rank == 0) aux_loss_ += static_cast<float>(o_.moe_aux_loss_coef * E * aux);
    // The step's routing statistics of this rank's rows: kept rows per (MoE block, expert),
    // dropped choices.
    const size_t first = static_cast<size_t>(moe_index(l)) * E;
    for (int e = 0; e < E; ++e) {
      moe_stats_.tokens[first + static_cast<size_t>(e)] += s.count[static_cast<size_t>(e)];
      moe_stats_.dropped -= s.count[static_cast<size_t>(e)];
    }
    moe_stats_.dropped += static_cast<int64_t>(N) * k;
  }
}

// Choice cj of this rank's row n: a packed slot of its expert if kept, else dropped (-1).
void Model::moe_admit(MoeState& s, size_t cj, int n, bool kept) {
  if (!kept) {
    s.slot[cj] = -1;
    return;
  }
  const int e = s.choice[cj];
  const int sl = e * s.cap_max + s.count[static_cast<size_t>(e)]++;
  s.slot[cj] = sl;
  s.host_idx[static_cast<size_t>(sl)] = n;
  s.host_gate[static_cast<size_t>(sl)] = s.weight[cj];
}

void Model::moe_forward(int l, MoeState& s, const Tensor& x, const Tensor& out) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int E = o_.moe_experts, C = o_.hidden;
  // This rank's tokens: the micro-batch's N_, or under tp its 1/tp of them (moe_tp.cc).
  const int N = static_cast<int>(x.shape[0]);
  // Router logits on the device, probabilities and choices on the host.
  const Tensor logits = s.logits.slice(0, {N, E});
  be_->matmul_forward(logits, x, param(p.router), Tensor{}, N, C, E);
  moe_route(l, s, logits);
  if (ep_.size > 1) return moe_ep_forward(l, s, x, out);  // the experts over the ep group
  be_->to_device_i32(s.idx, s.host_idx.data());
  be_->to_device(s.gate, s.host_gate.data());
  // Each expert on its packed rows; outputs added back with their combine weights.
  be_->zero(out);
  for (int e = 0; e < E; ++e) {
    const int M = s.count[static_cast<size_t>(e)];
    if (M == 0) continue;
    const int64_t r0 = static_cast<int64_t>(e) * s.cap_max;
    const Tensor idx = s.idx.slice(r0, {M}), gate = s.gate.slice(r0, {M});
    be_->gather_rows(s.xin.slice(r0 * C, {M, C}), x, idx, Tensor{}, M, C);
    expert_forward(l, e, s, r0, M);
    be_->scatter_add_rows(out, s.y.slice(r0 * C, {M, C}), idx, gate, M, C);
  }
}

void Model::expert_forward(int l, int j, MoeState& s, int64_t r0, int M) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int C = o_.hidden, F = o_.ffn_hidden;
  const bool gpt2 = o_.arch == Arch::kGpt2;
  const int FC = gpt2 ? F : 2 * F;
  const size_t ue = static_cast<size_t>(j);
  const Tensor xin = s.xin.slice(r0 * C, {M, C}), h = s.h.slice(r0 * FC, {M, FC});
  const Tensor a = s.act.slice(r0 * F, {M, F}), y = s.y.slice(r0 * C, {M, C});
  be_->matmul_forward(h, xin, pspan(p.expert_fc_w[ue], {FC, C}), pspan(p.expert_fc_b[ue], {FC}),
                      M, C, FC);
  if (gpt2) {
    be_->gelu_forward(a, h);
  } else {
    be_->swiglu_forward(a, h, M, F);
  }
  be_->matmul_forward(y, a, pspan(p.expert_proj_w[ue], {C, F}), pspan(p.expert_proj_b[ue], {C}),
                      M, F, C);
}

void Model::expert_backward(int l, int j, MoeState& s, int64_t r0, int M, const Tensor& dy,
                            const Tensor& dxin) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int C = o_.hidden, F = o_.ffn_hidden;
  const bool gpt2 = o_.arch == Arch::kGpt2;
  const int FC = gpt2 ? F : 2 * F;
  const size_t ue = static_cast<size_t>(j);
  const Tensor xin = s.xin.slice(r0 * C, {M, C}), h = s.h.slice(r0 * FC, {M, FC});
  const Tensor a = s.act.slice(r0 * F, {M, F});
  const Tensor dh = s.dh.slice(0, {M, FC}), da = s.dactv.slice(0, {M, F});
  be_->zero(da);
  be_->matmul_backward(da, gspan(p.expert_proj_w[ue], {C, F}), gspan(p.expert_proj_b[ue], {C}),
                       dy, a, pspan(p.expert_proj_w[ue], {C, F}), M, F, C);
  be_->zero(dh);
  if (gpt2) {
    be_->gelu_backward(dh, h, da);
  } else {
    be_->swiglu_backward(dh, h, da, M, F);
  }
  be_->zero(dxin);
  be_->matmul_backward(dxin, gspan(p.expert_fc_w[ue], {FC, C}), gspan(p.expert_fc_b[ue], {FC}),
                       dh, xin, pspan(p.expert_fc_w[ue], {FC, C}), M, C, FC);
}

void Model::moe_backward(int l, MoeState& s, const Tensor& x, const Tensor& dout,
                         const Tensor& dx) {
  const size_t S = static_cast<size_t>(o_.moe_experts) * s.cap_max;
  std::vector<float>& dgate = s.host_dgate;
  if (ep_.size > 1) {
    moe_ep_backward(l, s, dout, dx);  // fills dgate (the slot layout) on the source rank
  } else {
    moe_experts_backward(l, s, dout, dx);
    dgate.resize(S);
    be_->to_host(dgate.data(), s.dgate);
  }
  moe_router_backward(l, s, x, dx);
}

void Model::moe_experts_backward(int l, MoeState& s, const Tensor& dout, const Tensor& dx) {
  const int E = o_.moe_experts, C = o_.hidden;
  // Experts: d gate = dout . y per kept slot; dy = gate * dout; back through the MLP.
  for (int e = 0; e < E; ++e) {
    const int M = s.count[static_cast<size_t>(e)];
    if (M == 0) continue;
    const int64_t r0 = static_cast<int64_t>(e) * s.cap_max;
    const Tensor idx = s.idx.slice(r0, {M}), gate = s.gate.slice(r0, {M});
    const Tensor dy = s.dy.slice(0, {M, C}), dxin = s.dxin.slice(0, {M, C});
    be_->gathered_row_dot(s.dgate.slice(r0, {M}), dout, idx, s.y.slice(r0 * C, {M, C}), M, C);
    be_->gather_rows(dy, dout, idx, gate, M, C);
    expert_backward(l, e, s, r0, M, dy, dxin);
    be_->scatter_add_rows(dx, dxin, idx, Tensor{}, M, C);
  }
}

void Model::moe_router_backward(int l, MoeState& s, const Tensor& x, const Tensor& dx) {
  const BlockParams& p = bp_[static_cast<size_t>(l)];
  const int E = o_.moe_experts, k = o_.moe_top_k, C = o_.hidden, N = s.rows;
  const std::vector<float>& dgate = s.host_dgate;
  // Router, on the host: d weights -> d probs (renormalisation, aux loss over the
  // micro-batch's N_ x cp tokens) -> d logits of this rank's N.
  const double aux_scale = static_cast<double>(backward_scale_) * o_.moe_aux_loss_coef * E / (N_ * cp_.size);
  std::vector<double>& dp = s.dp;
  dp.resize(static_cast<size_t>(E));
  s.host_buf.resize(static_cast<size_t>(N) * E);
  for (int n = 0; n < N; ++n) {
    const float* pr = &s.probs[static_cast<size_t>(n) * E];
    for (int e = 0; e < E; ++e) dp[static_cast<size_t>(e)] = aux_scale * s.frac[static_cast<size_t>(e)];
    const size_t c0 = static_cast<size_t>(n) * k;
    if (k == 1) {
      if (s.slot[c0] >= 0) dp[static_cast<size_t>(s.choice[c0])] += dgate[static_cast<size_t>(s.slot[c0])];
    } else {
      // w_j = p_j / S  =>  dp_i += (dw_i - sum_j dw_j w_j) / S for each chosen i.
      double psum = 0.0, dot = 0.0;
      for (int j = 0; j < k; ++j) {
        psum += pr[s.choice[c0 + j]];
        if (s.slot[c0 + j] >= 0) dot += dgate[static_cast<size_t>(s.slot[c0 + j])] * static_cast<double>(s.weight[c0 + j]);
      }
      for (int j = 0; j < k; ++j) {
        const double dw = s.slot[c0 + j] >= 0 ? dgate[static_cast<size_t>(s.slot[c0 + j])] : 0.0;
        dp[static_cast<size_t>(s.choice[c0 + j])] += (dw - dot) / psum;
      }
    }
    // Softmax backward: dz_e = p_e (dp_e - sum_j p_j dp_j).
    double pdp = 0.0;
    for (int e = 0; e < E; ++e) pdp += pr[e] * dp[static_cast<size_t>(e)];
    for (int e = 0; e < E; ++e) {
      s.host_buf[static_cast<size_t>(n) * E + e] = static_cast<float>(pr[e] * (dp[static_cast<size_t>(e)] - pdp));
    }
  }
  const Tensor dlogits = s.dlogits.slice(0, {N, E});
  be_->to_device(dlogits, s.host_buf.data());
  be_->matmul_backward(dx, grad(p.router), Tensor{}, dlogits, x, param(p.router), N, C, E);
}

}  // namespace partrain::engine::model
