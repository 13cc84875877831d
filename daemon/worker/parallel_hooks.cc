// See parallel_hooks.h.
#include "worker/parallel_hooks.h"

#include "worker/group_sums.h"
#include "worker/pipeline_plan.h"

namespace partrain::worker {

namespace train = partrain::engine::train;

ParallelHooks::ParallelHooks(train::Trainer& trainer, const ParallelAxes& axes) : trainer_(trainer), a_(axes) {
  for (train::ModelPart& p : trainer_.parts()) handed_.emplace_back(p.model->table().specs().size(), false);
}

Status ParallelHooks::zero_status() const {
  for (const ZeroComm* z : a_.zero) PARTRAIN_RETURN_IF_ERROR(z->status());
  return Status::ok();
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
  const train::ModelPart& p = trainer_.parts()[static_cast<size_t>(part)];
  const engine::model::ParamSpec& spec = p.model->table().specs()[i];
  handed_[static_cast<size_t>(part)][i] = true;
  if (spec.expert && a_.expert != nullptr) return Status::ok();  // summed over expert-dp in sync_grads
  // ZeRO-1: the plugin adds this rank's part of the average into the part's gradient shard.
  float* shard = stage() == 1 ? a_.zero[static_cast<size_t>(part)]->shard_base(p.model->shard_grads()) : nullptr;
  return a_.data->grads_ready(p.model->grads().ptr<float>() + spec.offset,
                              static_cast<size_t>(p.view_offset + spec.offset), static_cast<size_t>(spec.numel()),
                              shard);
}

Status ParallelHooks::sync_grads(train::StepMetrics* m) {
  if (a_.tensor != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.tensor->status());
  if (a_.context != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.context->status());
  if (a_.data != nullptr) {
    PARTRAIN_RETURN_IF_ERROR(zero_status());
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
// Under ZeRO the reduced gradient lives in the dp group's shards, cut differently on the two
// stages: each rank gathers its stage's whole tensor from the shards, exchanges it, and adds
// the peer's into its own shard piece.
Status ParallelHooks::sum_tied_embeddings() {
  if (a_.pp == nullptr) return Status::ok();
  engine::Backend& be = trainer_.backend();
  const bool sharded = a_.data != nullptr && stage() >= 1;
  for (size_t i = 0; i < trainer_.parts().size(); ++i) {
    const train::ModelPart& p = trainer_.parts()[i];
    engine::model::Model& m = *p.model;
    const bool emb = m.options().tie_embeddings && m.first_stage() && !m.last_stage();
    if (!emb && !m.holds_tied_head_copy()) continue;
    const int t = m.table().find(m.tied_embedding_name());
    const engine::model::ParamSpec& spec = m.table().specs()[static_cast<size_t>(t)];
    std::vector<engine::Tensor> scratch;  // released on every way out
    auto alloc = [&]() -> Result<engine::Tensor> {
      Result<engine::Tensor> r = be.alloc(engine::MemCategory::kWorkspace, engine::DType::kF32, spec.shape);
      if (r) scratch.push_back(*r);
      return r;
    };
    Status s = [&]() -> Status {
      engine::Tensor mine = sharded ? engine::Tensor{} : m.grad(t);
      if (sharded) {
        Result<engine::Tensor> whole = alloc();
        if (!whole) return whole.status();
        mine = *whole;
        PARTRAIN_RETURN_IF_ERROR(a_.data->params_gather(a_.zero[i]->shard_base(m.shard_grads()), mine.ptr<float>(),
                                                        static_cast<size_t>(p.view_offset + spec.offset),
                                                        static_cast<size_t>(spec.numel())));
        PARTRAIN_RETURN_IF_ERROR(a_.data->params_wait(mine.ptr<float>()));
      }
      Result<engine::Tensor> other = alloc();
      if (!other) return other.status();
      const int peer = emb ? a_.pp->size() - 1 : 0;
      const size_t n = static_cast<size_t>(spec.numel());
      PARTRAIN_RETURN_IF_ERROR(a_.pp->batch_send_recv({{true, mine.ptr<float>(), n, peer, kTagTied},
                                                       {false, other->ptr<float>(), n, peer, kTagTied}})->wait());
      if (!sharded) {
        be.accumulate(mine, *other);
        return Status::ok();
      }
      // The tensor's elements inside this rank's shard of the part.
      const int64_t lo = std::max(m.shard().begin, spec.offset);
      const int64_t hi = std::min(m.shard().end, spec.offset + spec.numel());
      if (lo < hi) {
        be.accumulate(m.shard_grads().slice(lo - m.shard().begin, {hi - lo}),
                      other->slice(lo - spec.offset, {hi - lo}));
      }
      return Status::ok();
    }();
    for (engine::Tensor& x : scratch) be.release(&x);
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
  if (!a_.zero.empty()) {  // the shards' squares over the dp group
    sq = a_.zero.front()->sum(sq);
    PARTRAIN_RETURN_IF_ERROR(zero_status());
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
  PARTRAIN_RETURN_IF_ERROR(zero_status());
  if (stage() == 1 || stage() == 2) {  // every rank stepped its shard: gather the full parameters
    for (size_t i = 0; i < trainer_.parts().size(); ++i) {
      train::ModelPart& p = trainer_.parts()[i];
      float* params = p.model->params().ptr<float>();
      PARTRAIN_RETURN_IF_ERROR(a_.data->params_gather(a_.zero[i]->shard_base(p.model->shard_params()), params,
                                                      static_cast<size_t>(p.view_offset),
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
