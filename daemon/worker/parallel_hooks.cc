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
  if (a_.data != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.data->step_begin(step));
  if (a_.expert_data != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.expert_data->step_begin(step));
  return Status::ok();
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
  const engine::Tensor grad = p.model->grads().slice(spec.offset, engine::Shape{spec.numel()});
  if (stage() == 1) {  // ZeRO-1: this rank's part of the average is added into the part's shard
    ZeroComm& z = *a_.zero[static_cast<size_t>(part)];
    z.reduce_grads(grad, spec.offset, p.model->shard_grads());  // (summed over tp first where tp_summed)
    return z.status();
  }
  PARTRAIN_RETURN_IF_ERROR(sum_over_tp(grad, spec));
  if (spec.expert && a_.expert != nullptr) return Status::ok();  // summed over expert-dp in sync_grads
  const size_t at = static_cast<size_t>(p.view_offset[0] + p.views.view_offset(spec));
  return a_.data->grads_ready(grad.ptr<float>(), at, static_cast<size_t>(spec.numel()), nullptr);
}

// A MoE router's or expert's gradient under tp: each tp rank routed its own tokens.
Status ParallelHooks::sum_over_tp(const engine::Tensor& grad, const engine::model::ParamSpec& spec) {
  if (!spec.tp_summed || a_.tensor == nullptr) return Status::ok();
  a_.tensor->all_reduce_sum(grad);
  return a_.tensor->status();
}

Status ParallelHooks::sync_grads(train::StepMetrics* m) {
  if (a_.tensor != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.tensor->status());
  if (a_.context != nullptr) PARTRAIN_RETURN_IF_ERROR(a_.context->status());
  if (a_.data == nullptr) {  // no data plugin to hand the gradients to: the tp sums here
    for (train::ModelPart& p : trainer_.parts()) {
      for (const engine::model::ParamSpec& spec : p.model->table().specs()) {
        PARTRAIN_RETURN_IF_ERROR(sum_over_tp(p.model->grads().slice(spec.offset, engine::Shape{spec.numel()}), spec));
      }
    }
  }
  if (a_.data != nullptr) {
    PARTRAIN_RETURN_IF_ERROR(zero_status());
    // A v1 plugin is handed the one flat gradient buffer it averages.
    const bool flat = stage() < 2 && trainer_.parts().size() == 1;
    PARTRAIN_RETURN_IF_ERROR(a_.data->grads_done(flat ? model(0).grads().ptr<float>() : nullptr));
  }
  if (a_.expert_data != nullptr) {  // ZeRO: the experts were reduced over expert-dp with the rest
    PARTRAIN_RETURN_IF_ERROR(a_.expert_data->grads_done(nullptr));
  }
  for (ZeroComm* z : a_.zero) PARTRAIN_RETURN_IF_ERROR(z->finish_grads());  // staged results into the shards
  if (a_.expert_data == nullptr && a_.expert != nullptr) {  // (under ZeRO the experts go with the rest)
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
        a_.zero[i]->gather_params(m.shard_grads(), mine, spec.offset);
        a_.zero[i]->wait_params(mine);
        PARTRAIN_RETURN_IF_ERROR(a_.zero[i]->status());
      }
      Result<engine::Tensor> other = alloc();
      if (!other) return other.status();
      const int peer = emb ? a_.pp->size() - 1 : 0;
      const size_t n = static_cast<size_t>(spec.numel());
      PARTRAIN_RETURN_IF_ERROR(
          a_.pp->batch_send_recv({{true, comm::Buffer{mine.data, mine.dtype, n, a_.memory}, peer},
                                  {false, comm::Buffer{other->data, other->dtype, n, a_.memory}, peer}})
              ->wait());
      if (!sharded) {
        be.accumulate(mine, *other);
        return Status::ok();
      }
      // The tensor's elements inside this rank's shard of the part.
      for (const engine::model::ShardOptions::Run& r : m.shard_runs()) {
        const int64_t lo = std::max(r.begin, spec.offset), hi = std::min(r.end, spec.offset + spec.numel());
        if (lo < hi) {
          be.accumulate(m.shard_grads().slice(r.at + (lo - r.begin), {hi - lo}),
                        other->slice(lo - spec.offset, {hi - lo}));
        }
      }
      return Status::ok();
    }();
    for (engine::Tensor& x : scratch) be.release(&x);
    PARTRAIN_RETURN_IF_ERROR(s);
  }
  return Status::ok();
}

// The step's routing over the global batch: under tp each rank counted its own tokens and
// each stage its own MoE blocks, so the counts are summed over tp, pp, then dp (whole
// numbers well inside float's exact range); the mean aux loss (the micro-batch's on every tp
// rank) over pp, then averaged over dp.
Status ParallelHooks::reduce_moe_stats(train::StepMetrics* m) {
  if (m->experts == 0 || (a_.pp_host == nullptr && a_.dp_host == nullptr && a_.tp_host == nullptr)) {
    return Status::ok();
  }
  const size_t n = m->expert_tokens.size();
  std::vector<float> v(m->expert_tokens.begin(), m->expert_tokens.end());
  v.push_back(static_cast<float>(m->dropped_tokens));
  // Under tp each rank counted its own tokens (the aux loss is the micro-batch's on each).
  if (a_.tp_host != nullptr) {
    PARTRAIN_RETURN_IF_ERROR(a_.tp_host->all_reduce(v.data(), v.size(), comm::ReduceOp::kSum)->wait());
  }
  const Split2 aux = split(m->aux_loss);
  for (float x : {aux.head, aux.rest}) v.push_back(x);
  for (comm::Communicator* host : {a_.pp_host, a_.dp_host}) {
    if (host != nullptr) PARTRAIN_RETURN_IF_ERROR(host->all_reduce(v.data(), v.size(), comm::ReduceOp::kSum)->wait());
  }
  for (size_t i = 0; i < n; ++i) m->expert_tokens[i] = static_cast<int64_t>(v[i]);
  m->dropped_tokens = static_cast<int64_t>(v[n]);
  m->aux_loss = join(v[n + 1], v[n + 2]) / a_.dp;
  return Status::ok();
}

Status ParallelHooks::reduce_loss(double* loss, bool* stop) {
  float stop_flag = *stop ? 1.0f : 0.0f;
  if (a_.tp_host != nullptr) {  // a tp group agrees on stopping first (its ranks' losses agree)
    PARTRAIN_RETURN_IF_ERROR(a_.tp_host->all_reduce(&stop_flag, 1, comm::ReduceOp::kMax)->wait());
  }
  if (a_.pp_host != nullptr) {
    const Split2 l = split(*loss);
    float shared[3] = {l.head, l.rest, stop_flag};
    PARTRAIN_RETURN_IF_ERROR(a_.pp_host->all_reduce(shared, 3, comm::ReduceOp::kSum)->wait());
    *loss = join(shared[0], shared[1]);
    stop_flag = shared[2];
  }
  if (a_.dp_host != nullptr) {
    float shared[2] = {static_cast<float>(*loss), stop_flag};
    PARTRAIN_RETURN_IF_ERROR(a_.dp_host->all_reduce(shared, 2, comm::ReduceOp::kSum)->wait());
    *loss = static_cast<double>(shared[0]) / a_.dp;
    stop_flag = shared[1];
  }
  *stop = stop_flag > 0;
  return Status::ok();
}

Status ParallelHooks::reduce_norm(const train::GradSquares& local, double* total) {
  double sq = local.dense;
  if (a_.expert != nullptr && a_.zero.empty()) {  // each ep rank holds its experts whole
    sq += a_.expert->sum(local.experts);
    PARTRAIN_RETURN_IF_ERROR(a_.expert->status());
  } else {  // one rank's experts, or ZeRO's expert-dp shards, which the dp sum covers
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
  if (a_.pp_host != nullptr) {
    Result<double> s = sum_over(*a_.pp_host, sq);
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
      PARTRAIN_RETURN_IF_ERROR(
          a_.zero[i]->gather_in_place(p.model->params(), 0, p.model->num_params(), p.model->shard_runs()));
    }
  }
  for (DataPluginComm* d : {a_.data, a_.expert_data}) {
    if (d == nullptr) continue;
    partrain_sync_stats_v2_t stats{};
    PARTRAIN_RETURN_IF_ERROR(d->step_end(&stats));
    m->add_comm(train::CommAxis::kDp, stats.comm_ms, stats.exposed_ms, static_cast<int>(stats.collectives),
                stats.bytes);
  }
  return Status::ok();
}

}  // namespace partrain::worker
