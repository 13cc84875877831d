// make_plan: validate, size, count bytes, time (see plan.h).
#include "planner/plan.h"

#include <algorithm>
#include <map>

#include "layout/layout.h"
#include "layout/mapping.h"
#include "layout/topology.h"
#include "layout/validate.h"
#include "pipeline/partition.h"
#include "planner/framework_memory.h"
#include "planner/runnable.h"

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

// Where a group's members sit under `mapping`.
GroupSpan span_of(const std::vector<int>& group, const SlurmView& view, const Mapping& mapping) {
  std::map<int, int> per_node;
  for (int r : group) ++per_node[mapping.slot_of_rank[static_cast<size_t>(r)].node];
  GroupSpan g;
  g.ranks = static_cast<int>(group.size());
  g.nodes = static_cast<int>(per_node.size());
  g.per_node = g.ranks;
  for (const auto& [node, count] : per_node) {
    g.per_node = std::min(g.per_node, count);
    if (view.link(per_node.begin()->first, node) == LinkClass::kInterSwitch) g.across_switches = true;
  }
  return g;
}

// The worst of two spans of one axis: most nodes, then fewest members per node.
GroupSpan worse(const GroupSpan& a, const GroupSpan& b) {
  const bool b_worse = b.nodes > a.nodes || (b.nodes == a.nodes && b.per_node < a.per_node);
  GroupSpan w = b_worse ? b : a;
  w.across_switches = a.across_switches || b.across_switches;
  return w;
}

GroupSpan worst_span(const std::vector<std::vector<int>>& groups, const SlurmView& view,
                     const Mapping& mapping) {
  if (groups.empty()) return {};
  GroupSpan worst = span_of(groups.front(), view, mapping);
  for (const std::vector<int>& g : groups) worst = worse(worst, span_of(g, view, mapping));
  return worst;
}

Spans spans_of(const Layout& layout, const SlurmView& view, const Mapping& mapping) {
  Spans s;
  s.tp = worst_span(layout.groups(Axis::kTp), view, mapping);
  s.cp = worst_span(layout.groups(Axis::kCp), view, mapping);
  s.ep = worst_span(layout.groups(Axis::kEp), view, mapping);
  s.pp = worst_span(layout.groups(Axis::kPp), view, mapping);
  s.dp = worst_span(gradient_groups(layout, Axis::kDp), view, mapping);
  s.expert_dp = layout.ep() > 1 ? worst_span(gradient_groups(layout, Axis::kExpertDp), view, mapping) : GroupSpan{};
  return s;
}

}  // namespace

std::string context_plugin(const config::JobConfig& job) {
  const std::string spec = job.parallelism.to_string();
  const size_t at = spec.find("cpimpl=");
  if (at == std::string::npos) return "ring";
  const size_t begin = at + 7, end = spec.find(',', begin);
  const std::string name = spec.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  return name == "allgather" ? "allgather" : "ring";
}

Result<Plan> make_plan(const config::JobConfig& job, const Cluster& cluster,
                       const HardwareProfile& hw, const Plan* same_traffic,
                       const PlanOptions& options) {
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
  // The layers' split over pp x virtual stages is the runtime's business (runnable.h): a
  // plan splits them by cost, so published layouts with uneven stages can be planned.
  ModelShape shape = shape_of(plan.model, job.model.moe_experts);
  shape.layers = 0;
  PARTRAIN_RETURN_IF_ERROR(validate(spec, facts, shape, batch));
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
  l.cp_impl = options.context_plugin.empty() ? context_plugin(job) : options.context_plugin;
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
  plan.runtime = options.runtime ? *options.runtime : partrain_runtime(hw.kind == "cpu");
  plan.stages = runtime_stage_memory(plan.model, l, plan.runtime, plan.precision, hw.fragmentation,
                                     hw.reserved_bytes);
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
  sizes.kv_hidden = static_cast<int>(plan.model.KV * plan.model.head_dim());
  if (same_traffic != nullptr) {
    plan.traffic = same_traffic->traffic;
    plan.grad_traffic = same_traffic->grad_traffic;
    plan.spans = same_traffic->spans;
  } else {
    Result<Mapping> mapping = map_topology_aware(*layout, view, sizes);
    if (!mapping) return mapping.status();
    plan.traffic = step_cost(*layout, view, *mapping, sizes);
    StepSizes grad_sizes = sizes;
    grad_sizes.bytes_per_element = plan.precision.grad_bytes;
    plan.grad_traffic = step_cost(*layout, view, *mapping, grad_sizes);
    plan.spans = spans_of(*layout, view, *mapping);
  }

  StepInputs in;
  in.model = plan.model;
  in.params = plan.params;
  in.layout = l;
  in.precision = plan.precision;
  in.runtime = plan.runtime;
  in.spans = plan.spans;
  plan.time = predict_step(in, hw);
  plan.runnable = runnable(plan.spec, job, hw.kind);
  return plan;
}

}  // namespace partrain::planner
