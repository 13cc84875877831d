// make_plan: validate, size, count bytes, time (see plan.h).
#include "planner/plan.h"

#include <algorithm>

#include "layout/layout.h"
#include "layout/mapping.h"
#include "layout/topology.h"
#include "layout/validate.h"
#include "pipeline/partition.h"

namespace partrain::planner {
namespace {

// Bounds that keep the per-rank tables of the layout core small and the sums in int.
constexpr int kMaxNodes = 1 << 14;
constexpr int kMaxGpusPerNode = 1 << 8;

Status check_cluster(const Cluster& c) {
  if (c.nodes < 1 || c.nodes > kMaxNodes) {
    return Status::invalid("partrain: --nodes " + std::to_string(c.nodes) +
                           ": give a node count from 1 to " + std::to_string(kMaxNodes));
  }
  if (c.gpus_per_node < 1 || c.gpus_per_node > kMaxGpusPerNode) {
    return Status::invalid("partrain: --gpus-per-node " + std::to_string(c.gpus_per_node) +
                           ": give a device count from 1 to " + std::to_string(kMaxGpusPerNode));
  }
  return Status::ok();
}

ModelShape shape_of(const ModelDims& m, int experts) {
  ModelShape s;
  s.hidden = static_cast<int>(m.C);
  s.heads = static_cast<int>(m.H);
  s.kv_heads = static_cast<int>(m.KV);
  s.layers = static_cast<int>(m.L);
  s.experts = experts;
  s.vocab = static_cast<int>(m.V);
  s.seq_len = static_cast<int>(m.T);
  return s;
}

}  // namespace

Result<Plan> make_plan(const config::JobConfig& job, const Cluster& cluster,
                       const HardwareProfile& hw, const Plan* same_traffic) {
  PARTRAIN_RETURN_IF_ERROR(check_cluster(cluster));
  Plan plan;
  plan.model = model_dims(job.model);
  plan.params = count_params(plan.model);
  plan.precision = hw.precision();
  const ParallelSpec& spec = job.parallelism;
  ClusterFacts facts;
  facts.world = cluster.world();
  facts.gpus_per_node = cluster.gpus_per_node;
  BatchShape batch;
  batch.global_batch = job.training.global_batch;
  batch.micro_batch = job.training.micro_batch;
  PARTRAIN_RETURN_IF_ERROR(validate(spec, facts, shape_of(plan.model, job.model.moe_experts), batch));
  Result<Layout> layout = Layout::create(facts.world, spec);
  if (!layout) return layout.status();
  plan.spec = layout->spec();
  Result<int> accum = config::grad_accum_steps(job, layout->dp());
  if (!accum) return accum.status();
  Result<int> micro = config::micro_batch_size(job, layout->dp());
  if (!micro) return micro.status();

  PlanLayout& l = plan.layout;
  l.tp = layout->tp();
  l.pp = layout->pp();
  l.dp = layout->dp();
  l.ep = layout->ep();
  l.cp = layout->cp();
  l.zero = spec.zero;
  l.sp = spec.sequence_parallel() && spec.tp > 1;
  l.sched = spec.sched;
  l.virtual_stages = spec.virtual_stages;
  l.micro_batch = *micro;
  l.grad_accum = *accum;
  if (l.pp > 1) {
    // The stages' blocks as the runtime splits them: the job's stage_layers when they fit
    // this layout, else balanced by cost, the embeddings with the first stage and the head
    // with the last (pipeline/partition.h).
    engine::ModelOptions resolved = job.model;
    resolved.kv_heads = static_cast<int>(plan.model.KV);
    resolved.ffn_hidden = static_cast<int>(plan.model.F);
    Result<std::vector<pipeline::PieceCost>> pieces = pipeline::piece_costs(resolved);
    if (!pieces) return pieces.status();
    const int stages = l.pp * std::max(1, l.virtual_stages);
    const bool own_split = static_cast<int>(job.stage_layers.size()) == stages;
    Result<std::vector<pipeline::StagePart>> parts =
        pipeline::partition_stages(*pieces, stages, own_split ? job.stage_layers : std::vector<int>{});
    if (!parts) return parts.status();
    for (const pipeline::StagePart& part : *parts) l.stage_bounds.push_back(part.first_block);
    l.stage_bounds.push_back(parts->back().end_block);
  }
  plan.global_batch = static_cast<int64_t>(l.micro_batch) * l.grad_accum * l.dp;
  plan.bubble = bubble_fraction(l.pp, l.grad_accum, l.virtual_stages);
  plan.stages = all_stage_memory(plan.model, l, plan.precision, hw.fragmentation, hw.reserved_bytes);
  plan.memory = plan.stages.front();  // the stage that needs most decides the fit
  for (const MemoryBreakdown& b : plan.stages) {
    if (b.total() > plan.memory.total()) plan.memory = b;
  }
  plan.capacity = hw.memory_bytes;
  plan.fits = plan.memory.total() <= plan.capacity;

  // Bytes per step: activations in their precision, gradients in theirs.
  const SlurmView view = SlurmView::uniform(cluster.nodes, cluster.gpus_per_node);
  StepSizes sizes;
  const double experts = plan.model.moe_layers * plan.model.E *
                         (plan.params.expert_split + plan.params.expert_repl);
  sizes.params = plan.params.total - experts;
  sizes.expert_params = experts;
  sizes.hidden = static_cast<int>(plan.model.C);
  sizes.seq_len = static_cast<int>(plan.model.T);
  sizes.micro_batch = l.micro_batch;
  sizes.grad_accum = l.grad_accum;
  sizes.layers = static_cast<int>(plan.model.L);
  sizes.bytes_per_element = plan.precision.act_bytes;
  sizes.top_k = static_cast<int>(plan.model.top_k);
  sizes.moe_layers = plan.model.moe_layers;
  if (same_traffic != nullptr) {
    plan.traffic = same_traffic->traffic;
    plan.grad_traffic = same_traffic->grad_traffic;
  } else {
    Result<Mapping> mapping = map_topology_aware(*layout, view, sizes);
    if (!mapping) return mapping.status();
    plan.traffic = step_cost(*layout, view, *mapping, sizes);
    StepSizes grad_sizes = sizes;
    grad_sizes.bytes_per_element = plan.precision.grad_bytes;
    plan.grad_traffic = step_cost(*layout, view, *mapping, grad_sizes);
  }

  StepInputs in;
  in.model = plan.model;
  in.params = plan.params;
  in.layout = l;
  in.memory = plan.memory;
  // One micro-batch's activations without recompute: what the elementwise kernels stream.
  ModelDims plain = plan.model;
  plain.recompute = engine::Recompute::kNone;
  PlanLayout single = l;
  single.pp = 1;
  single.grad_accum = 1;
  in.act_bytes_per_micro_batch =
      stage_memory(plain, single, plan.precision, 0, 0, 0).activations / l.pp;
  in.precision = plan.precision;
  in.traffic = plan.traffic;
  in.grad_traffic = plan.grad_traffic;
  in.nodes = cluster.nodes;
  in.gpus_per_node = cluster.gpus_per_node;
  plan.time = predict_step(in, hw);
  return plan;
}

}  // namespace partrain::planner
