// See parallel_hooks.h.
#include "worker/parallel_hooks.h"

#include "worker/group_sums.h"
#include "worker/pipeline_plan.h"

namespace partrain::worker {

namespace train = partrain::engine::train;

ParallelHooks::ParallelHooks(train::Trainer& trainer, const ParallelAxes& axes) : trainer_(trainer), a_(axes) {
  int64_t offset = 0;
  for (train::ModelPart& p : trainer_.parts()) {
    offsets_.push_back(offset);
    offset += p.model->num_params();
    handed_.emplace_back(p.model->table().specs().size(), false);
  }
}

Status ParallelHooks::begin_step(int64_t step) {
  return a_.data != nullptr ? a_.data->step_begin(step) : Status::ok();
}

// A block's gradients are final: hand its tensors over now, back to front.
Status ParallelHooks::block_grads_ready(int part, int layer) {
  if (a_.data == nullptr || stage() >= 2) return Status::ok();
  const engine::model::Model& m = model(part);
  const auto [lo, hi] = m.block_param_range(layer);
  const auto& specs = m.table().specs();
  for (size_t i = specs.size(); i-- > 0;) {
    if (specs[i].offset >= lo && specs[i].offset < hi) PARTRAIN_RETURN_IF_ERROR(hand_over(part, i));
  }
  return Status::ok();
}

// The part's backward is done: hand over what no block did (embeddings, final norm, head;
// on a pipeline stage all of it), back to front.
Status ParallelHooks::part_grads_ready(int part) {
  if (a_.data == nullptr || stage() >= 2) return Status::ok();
  std::vector<bool>& handed = handed_[static_cast<size_t>(part)];
  for (size_t i = handed.size(); i-- > 0;) {
    if (!handed[i]) PARTRAIN_RETURN_IF_ERROR(hand_over(part, i));
  }
  handed.assign(handed.size(), false);  // the next step starts over
  return Status::ok();
}

Status ParallelHooks::hand_over(int part, size_t i) {
  engine::model::Model& m = model(part);
  const engine::model::ParamSpec& spec = m.table().specs()[i];
  handed_[static_cast<size_t>(part)][i] = true;
  if (spec.expert && a_.expert != nullptr) return Status::ok();  // summed over expert-dp in sync_grads
  return a_.data->grads_ready(m.grads().ptr<float>() + spec.offset,
                              static_cast<size_t>(offsets_[static_cast<size_t>(part)] + spec.offset),
                              static_cast<size_t>(spec.numel()),
                              stage() == 1 ? m.shard_grads().ptr<float>() : nullptr);
}

Status ParallelHooks::sync_grads(train::StepMetrics* m) {
  if (a_.tensor != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.tensor->status());
  if (a_.context != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.context->status());
  if (a_.data != nullptr) {
    if (a_.zero != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.zero->status());
    // A v1 plugin is handed the one flat gradient buffer it averages.
    const bool flat = stage() < 2 && trainer_.parts().size() == 1;
    PARTRAIN_RETURN_IF_ERROR(a_.data->grads_done(flat ? model(0).grads().ptr<float>() : nullptr));
  }
  if (a_.expert != nullptr) {
    PARTRAIN_RETURN_IF_ERROR(a_.expert->status());
    for (train::ModelPart& p : trainer_.parts()) {
      PARTRAIN_RETURN_IF_ERROR(reduce_expert_grads(*a_.expert, *p.model, 1.0f / static_cast<float>(a_.dp * a_.cp)));
    }
  }
  PARTRAIN_RETURN_IF_ERROR(sum_tied_embeddings());
  return reduce_moe_stats(m);
}

// GPT-2's head is wte: the first stage's copy has the embedding's gradient, the last
// stage's the head's; each adds the other's, so both hold the sum (a + b = b + a exactly).
// Stage 0 lives on pp rank 0 and the last stage on pp rank pp-1, whatever the chunking.
Status ParallelHooks::sum_tied_embeddings() {
  if (a_.pp == nullptr) return Status::ok();
  engine::Backend& be = trainer_.backend();
  for (train::ModelPart& p : trainer_.parts()) {
    engine::model::Model& m = *p.model;
    const bool emb = m.options().tie_embeddings && m.first_stage() && !m.last_stage();
    if (!emb && !m.holds_tied_head_copy()) continue;
    const engine::Tensor g = m.grad(m.table().find(m.tied_embedding_name()));
    Result<engine::Tensor> other = be.alloc(engine::MemCategory::kWorkspace, engine::DType::kF32, g.shape);
    if (!other) return other.status();
    const int peer = emb ? a_.pp->size() - 1 : 0;
    const size_t n = static_cast<size_t>(g.numel());
    Status s = a_.pp->batch_send_recv({{true, g.ptr<float>(), n, peer, kTagTied},
                                       {false, other->ptr<float>(), n, peer, kTagTied}})->wait();
    if (s) be.accumulate(g, *other);
    be.release(&*other);
    PARTRAIN_RETURN_IF_ERROR(s);
  }
  return Status::ok();
}

// The step's routing over the global batch: each stage counted its own MoE blocks, so the
// counts are summed over pp, then over dp (whole numbers well inside float's exact range);
// the mean aux loss likewise, then averaged over dp.
Status ParallelHooks::reduce_moe_stats(train::StepMetrics* m) {
  if (m->experts == 0 || (a_.pp == nullptr && a_.dp_values == nullptr)) return Status::ok();
  const size_t n = m->expert_tokens.size();
  std::vector<float> v(m->expert_tokens.begin(), m->expert_tokens.end());
  const Split2 aux = split(m->aux_loss);
  for (float x : {static_cast<float>(m->dropped_tokens), aux.head, aux.rest}) v.push_back(x);
  if (a_.pp != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.pp->all_reduce(v.data(), v.size(), comm::ReduceOp::kSum)->wait());
  if (a_.dp_values != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.dp_values->all_reduce(v.data(), v.size(), comm::ReduceOp::kSum));
  for (size_t i = 0; i < n; ++i) m->expert_tokens[i] = static_cast<int64_t>(v[i]);
  m->dropped_tokens = static_cast<int64_t>(v[n]);
  m->aux_loss = join(v[n + 1], v[n + 2]) / a_.dp;
  return Status::ok();
}

Status ParallelHooks::reduce_loss(double* loss, bool* stop) {
  float stop_flag = *stop ? 1.0f : 0.0f;
  if (a_.tp != nullptr) {  // a tp group agrees on stopping first (its ranks' losses agree)
    PARTRAIN_RETURN_IF_ERROR(a_.tp->all_reduce(&stop_flag, 1, comm::ReduceOp::kMax)->wait());
  }
  if (a_.pp != nullptr) {
    const Split2 l = split(*loss);
    float shared[3] = {l.head, l.rest, stop_flag};
    PARTRAIN_RETURN_IF_ERROR(a_.pp->all_reduce(shared, 3, comm::ReduceOp::kSum)->wait());
    *loss = join(shared[0], shared[1]);
    stop_flag = shared[2];
  }
  if (a_.dp_values != nullptr) {
    float shared[2] = {static_cast<float>(*loss), stop_flag};
    PARTRAIN_RETURN_IF_ERROR(a_.dp_values->all_reduce(shared, 2, comm::ReduceOp::kSum));
    *loss = static_cast<double>(shared[0]) / a_.dp;
    stop_flag = shared[1];
  }
  *stop = stop_flag > 0;
  return Status::ok();
}

Status ParallelHooks::reduce_norm(const train::GradSquares& local, double* total) {
  double sq = local.dense;
  if (a_.expert != nullptr) {
    sq += a_.expert->sum(local.experts);
    PARTRAIN_RETURN_IF_ERROR(a_.expert->status());
  } else {
    sq += local.experts;
  }
  if (a_.zero != nullptr) {
    sq = a_.zero->sum(sq);
    PARTRAIN_RETURN_IF_ERROR(a_.zero->status());
  }
  if (a_.tensor != nullptr) {
    sq = a_.tensor->sum(sq);
    PARTRAIN_RETURN_IF_ERROR(a_.tensor->status());
  }
  if (a_.pp != nullptr) {
    Result<double> s = sum_over(*a_.pp, sq);
    if (!s) return s.status();
    sq = *s;
  }
  *total = sq;
  return Status::ok();
}

Status ParallelHooks::after_step(train::StepMetrics* m) {
  if (a_.expert != nullptr) {  // the all-to-alls, the norm's sum, the experts' gradients: all exposed
    partrain_expert_stats_v1_t es{};
    PARTRAIN_RETURN_IF_ERROR(a_.expert->step_end(&es));
    m->add_comm(train::CommAxis::kEp, es.comm_ms, es.comm_ms, static_cast<int>(es.collectives));
  }
  if (a_.context != nullptr) {  // the K/V transfers: the ring's overlap the host's attention
    partrain_context_stats_v1_t cs{};
    PARTRAIN_RETURN_IF_ERROR(a_.context->step_end(&cs));
    m->add_comm(train::CommAxis::kCp, cs.comm_ms, cs.exposed_ms, static_cast<int>(cs.collectives));
  }
  if (a_.tensor != nullptr) {  // the regions' collectives: all exposed (each is waited for)
    partrain_tensor_stats_v1_t ts{};
    PARTRAIN_RETURN_IF_ERROR(a_.tensor->step_end(&ts));
    m->add_comm(train::CommAxis::kTp, ts.comm_ms, ts.comm_ms, static_cast<int>(ts.collectives));
  }
  if (a_.data == nullptr) return Status::ok();
  if (a_.zero != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.zero->status());
  if (stage() == 1 || stage() == 2) {  // every rank stepped its shard: gather the full parameters
    for (train::ModelPart& p : trainer_.parts()) {
      float* params = p.model->params().ptr<float>();
      PARTRAIN_RETURN_IF_ERROR(a_.data->params_gather(p.model->shard_params().ptr<float>(), params, 0,
                                                      static_cast<size_t>(p.model->num_params())));
      PARTRAIN_RETURN_IF_ERROR(a_.data->params_wait(params));
    }
  }
  partrain_sync_stats_v2_t stats{};
  PARTRAIN_RETURN_IF_ERROR(a_.data->step_end(&stats));
  m->add_comm(train::CommAxis::kDp, stats.comm_ms, stats.exposed_ms, static_cast<int>(stats.collectives));
  return Status::ok();
}

}  // namespace partrain::worker
