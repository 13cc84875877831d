// Expert parallelism: the dispatch plan and the MoE experts over the ep group (see
// expert_parallel.h). Routing itself is moe.cc's, unchanged: it decides on the source rank.
#include "engine/model/expert_parallel.h"

#include "engine/model/model.h"
#include "engine/model/model_internal.h"

namespace partrain::engine::model {

DispatchPlan plan_dispatch(const std::vector<int>& counts, const std::vector<int>& incoming, int size) {
  const int E = static_cast<int>(counts.size()), El = E / size;
  DispatchPlan p;
  p.packed_offset.assign(static_cast<size_t>(E), 0);
  p.send_rows.assign(static_cast<size_t>(size), 0);
  p.recv_rows.assign(static_cast<size_t>(size), 0);
  for (int e = 0; e < E; ++e) {
    p.packed_offset[static_cast<size_t>(e)] = p.sent;
    p.sent += counts[static_cast<size_t>(e)];
    p.send_rows[static_cast<size_t>(e / El)] += static_cast<size_t>(counts[static_cast<size_t>(e)]);
  }
  for (int q = 0; q < size; ++q) {
    for (int j = 0; j < El; ++j) {
      const int rows = incoming[static_cast<size_t>(q * El + j)];
      if (rows > 0) p.segments.push_back({q, j, p.received, rows});
      p.received += rows;
      p.recv_rows[static_cast<size_t>(q)] += static_cast<size_t>(rows);
    }
  }
  return p;
}

namespace {

std::vector<size_t> times(const std::vector<size_t>& rows, int C) {
  std::vector<size_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * static_cast<size_t>(C);
  return out;
}

}  // namespace

void Model::moe_ep_forward(int l, MoeState& s, const Tensor& x, const Tensor& out) {
  const int E = o_.moe_experts, C = o_.hidden, P = ep_.size;
  const int El = E / P;
  // The counts first: rank p learns how many rows each source sends to each of its experts
  // (through backend memory, where the ep group's collectives take their buffers).
  s.send_counts.assign(s.count.begin(), s.count.end());
  s.recv_counts.resize(static_cast<size_t>(E));
  const std::vector<size_t> per_rank(static_cast<size_t>(P), static_cast<size_t>(El));
  const Tensor send = s.counts.slice(0, {E}), recv = s.counts.slice(E, {E});
  be_->to_device(send, s.send_counts.data());
  ep_comm_->all_to_allv(send.ptr<float>(), per_rank, recv.ptr<float>(), per_rank);
  be_->to_host(s.recv_counts.data(), recv);
  std::vector<int> incoming(static_cast<size_t>(E));
  for (int i = 0; i < E; ++i) incoming[static_cast<size_t>(i)] = static_cast<int>(s.recv_counts[static_cast<size_t>(i)]);
  s.plan = plan_dispatch(s.count, incoming, P);
  // Pack this rank's kept rows by expert (token order inside each), with their weights.
  const int64_t K = s.plan.sent;
  for (int e = 0; e < E; ++e) {
    const int64_t at = s.plan.packed_offset[static_cast<size_t>(e)];
    for (int c = 0; c < s.count[static_cast<size_t>(e)]; ++c) {
      const size_t sl = static_cast<size_t>(e) * s.cap_max + c;
      s.host_send_idx[static_cast<size_t>(at + c)] = s.host_idx[sl];
      s.host_send_gate[static_cast<size_t>(at + c)] = s.host_gate[sl];
    }
  }
  if (K > 0) {
    be_->to_device_i32(s.send_idx.slice(0, {K}), s.host_send_idx.data());
    be_->to_device(s.send_gate.slice(0, {K}), s.host_send_gate.data());
  }
  for (int e = 0; e < E; ++e) {
    const int M = s.count[static_cast<size_t>(e)];
    if (M == 0) continue;
    const int64_t at = s.plan.packed_offset[static_cast<size_t>(e)];
    be_->gather_rows(s.xsend.slice(at * C, {M, C}), x, s.send_idx.slice(at, {M}), Tensor{}, M, C);
  }
  // Dispatch, the local experts on every source's rows, combine.
  ep_comm_->all_to_allv(s.xsend.ptr<float>(), times(s.plan.send_rows, C), s.xin.ptr<float>(),
                        times(s.plan.recv_rows, C));
  for (const DispatchPlan::Segment& g : s.plan.segments) expert_forward(l, g.local_expert, s, g.row, g.rows);
  ep_comm_->all_to_allv(s.y.ptr<float>(), times(s.plan.recv_rows, C), s.yback.ptr<float>(),
                        times(s.plan.send_rows, C));
  be_->zero(out);
  for (int e = 0; e < E; ++e) {  // per expert: a token appears once in each
    const int M = s.count[static_cast<size_t>(e)];
    if (M == 0) continue;
    const int64_t at = s.plan.packed_offset[static_cast<size_t>(e)];
    be_->scatter_add_rows(out, s.yback.slice(at * C, {M, C}), s.send_idx.slice(at, {M}),
                          s.send_gate.slice(at, {M}), M, C);
  }
}

void Model::moe_ep_backward(int l, MoeState& s, const Tensor& dout, const Tensor& dx) {
  const int E = o_.moe_experts, C = o_.hidden;
  const int64_t K = s.plan.sent;
  // On the source: d gate = dout . y per kept row (into the slot layout the router's
  // backward reads), and the rows' output gradients gate * dout, sent to the experts.
  s.host_dgate.resize(static_cast<size_t>(E) * s.cap_max);
  if (K > 0) {
    be_->gathered_row_dot(s.dgate.slice(0, {K}), dout, s.send_idx.slice(0, {K}), s.yback.slice(0, {K, C}),
                          static_cast<int>(K), C);
    s.host_buf.resize(static_cast<size_t>(K));
    be_->to_host(s.host_buf.data(), s.dgate.slice(0, {K}));
  }
  for (int e = 0; e < E; ++e) {
    const int64_t at = s.plan.packed_offset[static_cast<size_t>(e)];
    for (int c = 0; c < s.count[static_cast<size_t>(e)]; ++c) {
      s.host_dgate[static_cast<size_t>(e) * s.cap_max + c] = s.host_buf[static_cast<size_t>(at + c)];
    }
    const int M = s.count[static_cast<size_t>(e)];
    if (M > 0) {
      be_->gather_rows(s.xsend.slice(at * C, {M, C}), dout, s.send_idx.slice(at, {M}),
                       s.send_gate.slice(at, {M}), M, C);
    }
  }
  ep_comm_->all_to_allv(s.xsend.ptr<float>(), times(s.plan.send_rows, C), s.dyrecv.ptr<float>(),
                        times(s.plan.recv_rows, C));
  // The local experts' backward on every source's rows (weight gradients accumulate).
  for (const DispatchPlan::Segment& g : s.plan.segments) {
    expert_backward(l, g.local_expert, s, g.row, g.rows, s.dyrecv.slice(g.row * C, {g.rows, C}),
                    s.dxrecv.slice(g.row * C, {g.rows, C}));
  }
  // The input gradients come back to the source and are added to their tokens.
  ep_comm_->all_to_allv(s.dxrecv.ptr<float>(), times(s.plan.recv_rows, C), s.xsend.ptr<float>(),
                        times(s.plan.send_rows, C));
  for (int e = 0; e < E; ++e) {
    const int M = s.count[static_cast<size_t>(e)];
    if (M == 0) continue;
    const int64_t at = s.plan.packed_offset[static_cast<size_t>(e)];
    be_->scatter_add_rows(dx, s.xsend.slice(at * C, {M, C}), s.send_idx.slice(at, {M}), Tensor{}, M, C);
  }
}

}  // namespace partrain::engine::model
