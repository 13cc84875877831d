// `partrain layout`: show how a --partrain spec lays out on an allocation, before any job
// runs. Prints the rank table (which Slurm task plays which rank, on which node and device,
// with its tp/ep/dp/pp coordinates), every group per axis, and the bytes per training step
// crossing each link class, for the topology-aware mapping next to Slurm's plain task order.
//
//   partrain layout --partrain=tp4,pp2 --nodes 8 --gpus-per-node 8 [--distribution cyclic]
//                   [--nvlink-domain D] [--topology topology.conf] [--json]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/units.h"
#include "layout/cost_model.h"
#include "layout/hostlist.h"
#include "layout/layout.h"
#include "layout/mapping.h"
#include "layout/spec.h"
#include "layout/topology.h"
#include "layout/validate.h"

namespace partrain::cli {
namespace {

struct LayoutArgs {
  std::string spec;
  int nodes = 0;
  int gpus_per_node = 0;
  int nvlink_domain = 0;
  std::string distribution = "block";
  std::string topology;
  std::string nodelist;
  std::string tasks_per_node;
  bool json = false;
  bool ranks = false;  // the full rank table and every group, however many ranks
  StepSizes sizes;
  int grad_accum = 0;  // 0 = the spec's mb=, else StepSizes' default
};

// Everything the two outputs show, computed once.
struct Report {
  SlurmView view;
  Layout layout;
  Mapping aware;
  Mapping slurm;
  StepCost aware_cost;
  StepCost slurm_cost;
  StepSizes sizes;
};

Result<SlurmView> make_view(const LayoutArgs& a) {
  // Bounds that keep the tables printable and the arithmetic in int.
  constexpr int kMaxNodes = 1 << 16;
  constexpr int kMaxGpusPerNode = 1 << 10;
  if (a.nodes > kMaxNodes || a.gpus_per_node > kMaxGpusPerNode) {
    return Status::invalid("partrain: layout handles up to " + std::to_string(kMaxNodes) +
                           " nodes of up to " + std::to_string(kMaxGpusPerNode) +
                           " GPUs; give a smaller --nodes or --gpus-per-node");
  }
  SlurmView view;
  if (!a.nodelist.empty()) {
    Result<std::vector<std::string>> names = expand_hostlist(a.nodelist, "--nodelist");
    if (!names.is_ok()) return names.status();
    view.nodes = std::move(names).value();
    if (a.nodes > 0 && static_cast<size_t>(a.nodes) != view.nodes.size()) {
      return Status::invalid("partrain: --nodes " + std::to_string(a.nodes) + " but --nodelist '" +
                             a.nodelist + "' names " + std::to_string(view.nodes.size()) +
                             " nodes; give one of them or make them agree");
    }
  } else if (a.nodes > 0) {
    view = SlurmView::uniform(a.nodes, a.gpus_per_node);
  } else {
    return Status::invalid("partrain: layout needs the allocation size; give --nodes N (or "
                           "--nodelist)");
  }
  if (a.gpus_per_node < 1) {
    return Status::invalid("partrain: layout needs --gpus-per-node G with G >= 1");
  }
  view.gpus_per_node = a.gpus_per_node;
  view.nvlink_domain = a.nvlink_domain;
  if (a.tasks_per_node.empty()) {
    view.tasks_per_node.assign(view.nodes.size(), a.gpus_per_node);
  } else {
    Result<std::vector<int>> counts = expand_task_counts(a.tasks_per_node, "--tasks-per-node");
    if (!counts.is_ok()) return counts.status();
    view.tasks_per_node = std::move(counts).value();
  }
  Result<Distribution> d = parse_distribution(a.distribution);
  if (!d.is_ok()) return d.status();
  view.distribution = *d;
  if (!a.topology.empty()) {
    Result<SwitchTree> tree = SwitchTree::load(a.topology);
    if (!tree.is_ok()) return tree.status();
    view.switches = std::move(tree).value();
  }
  PARTRAIN_RETURN_IF_ERROR(view.check());
  constexpr int kMaxWorld = 1 << 20;  // one table line per rank
  if (view.world() > kMaxWorld) {
    return Status::invalid("partrain: layout prints one line per rank and handles up to " +
                           std::to_string(kMaxWorld) + " ranks; give fewer nodes or tasks");
  }
  return view;
}

Result<Report> compute(const LayoutArgs& a) {
  Result<ParallelSpec> spec = parse_spec(a.spec);
  if (!spec.is_ok()) return spec.status();
  Result<SlurmView> view = make_view(a);
  if (!view.is_ok()) return view.status();
  ClusterFacts facts;
  facts.world = view->world();
  facts.gpus_per_node = view->gpus_per_node;
  facts.nvlink_domain = view->nvlink_domain;
  PARTRAIN_RETURN_IF_ERROR(validate(*spec, facts));
  Result<Layout> layout = Layout::create(facts.world, *spec);
  if (!layout.is_ok()) return layout.status();
  StepSizes sizes = a.sizes;
  if (a.grad_accum > 0) {
    sizes.grad_accum = a.grad_accum;
  } else if (spec->mb) {
    sizes.grad_accum = *spec->mb;
  }
  Result<Mapping> aware = map_topology_aware(*layout, *view, sizes);
  if (!aware.is_ok()) return aware.status();
  Result<Mapping> slurm = map_slurm_order(*layout, *view);
  if (!slurm.is_ok()) return slurm.status();
  StepCost aware_cost = step_cost(*layout, *view, *aware, sizes);
  StepCost slurm_cost = step_cost(*layout, *view, *slurm, sizes);
  return Report{std::move(view).value(), std::move(layout).value(), std::move(aware).value(),
                std::move(slurm).value(), aware_cost, slurm_cost, sizes};
}

// --- JSON, written by hand: numbers, strings and arrays of ints are all we need. ---

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_ints(const std::vector<int>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

std::string json_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string json_link_bytes(const LinkBytes& b) {
  std::string out = "{";
  for (int c = 0; c < kNumLinkClasses; ++c) {
    out += json_string(std::string(link_class_name(static_cast<LinkClass>(c)))) + ":" +
           json_number(b.bytes[c]) + ",";
  }
  char seconds[64];
  std::snprintf(seconds, sizeof seconds, "%.6g", link_seconds(b));
  return out + "\"total\":" + json_number(b.total()) + ",\"link_seconds\":" + seconds + "}";
}

std::string json_cost(const StepCost& c) {
  std::string out = "{\"links\":" + json_link_bytes(c.total) + ",\"by_axis\":{";
  const std::pair<const char*, const LinkBytes*> parts[] = {
      {"tp", &c.tp}, {"cp", &c.cp}, {"ep", &c.ep}, {"dp", &c.dp}, {"pp", &c.pp}};
  for (size_t i = 0; i < std::size(parts); ++i) {
    out += std::string(i ? "," : "") + json_string(parts[i].first) + ":" +
           json_link_bytes(*parts[i].second);
  }
  return out + "}}";
}

void print_json(const Report& r) {
  const Layout& l = r.layout;
  std::string out = "{\"world\":" + std::to_string(l.world()) + ",\"tp\":" +
                    std::to_string(l.tp()) + ",\"pp\":" + std::to_string(l.pp()) + ",\"dp\":" +
                    std::to_string(l.dp()) + ",\"ep\":" + std::to_string(l.ep()) + ",\"cp\":" +
                    std::to_string(l.cp()) + ",\"spec\":" + json_string(l.spec().to_string()) +
                    ",\"distribution\":" +
                    json_string(std::string(distribution_name(r.view.distribution))) +
                    ",\"tp_domain_local\":" + (r.aware.tp_domain_local ? "true" : "false") +
                    ",\n\"ranks\":[";
  for (int rank = 0; rank < l.world(); ++rank) {
    const RankCoord c = l.coord(rank);
    const TaskSlot s = r.aware.slot_of_rank[rank];
    out += std::string(rank ? ",\n" : "\n") + "{\"rank\":" + std::to_string(rank) +
           ",\"task\":" + std::to_string(r.aware.task_of_rank[rank]) +
           ",\"node\":" + json_string(r.view.nodes[s.node]) +
           ",\"node_index\":" + std::to_string(s.node) + ",\"local\":" + std::to_string(s.local) +
           ",\"tp\":" + std::to_string(c.tp) + ",\"cp\":" + std::to_string(c.cp) +
           ",\"ep\":" + std::to_string(c.ep) + ",\"dp\":" + std::to_string(c.dp) +
           ",\"pp\":" + std::to_string(c.pp) + "}";
  }
  out += "],\n\"groups\":{";
  for (size_t i = 0; i < kAllAxes.size(); ++i) {
    out += std::string(i ? ",\n" : "\n") + json_string(std::string(axis_name(kAllAxes[i]))) +
           ":[";
    std::vector<std::vector<int>> groups = l.groups(kAllAxes[i]);
    for (size_t g = 0; g < groups.size(); ++g) out += (g ? "," : "") + json_ints(groups[g]);
    out += "]";
  }
  out += "},\n\"cost\":{\"unit\":\"bytes per training step\",\"aware\":" +
         json_cost(r.aware_cost) + ",\"slurm_order\":" + json_cost(r.slurm_cost) + "}}\n";
  std::fputs(out.c_str(), stdout);
}

// --- Text. ---

std::string gigabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", bytes / 1e9);
  return buf;
}

// Worlds up to this size print every rank and group by default; larger ones a summary
// (--ranks prints them all).
constexpr int kFullTableRanks = 64;
constexpr size_t kSummaryGroups = 3;

void print_text(const Report& r, bool all_ranks) {
  const Layout& l = r.layout;
  const bool full = all_ranks || l.world() <= kFullTableRanks;
  std::printf("partrain layout: %s on %s x %s (%s distribution%s)\n",
              l.spec().to_string().c_str(), plural(static_cast<int64_t>(r.view.nodes.size()), "node").c_str(),
              plural(r.view.gpus_per_node, "GPU").c_str(),
              std::string(distribution_name(r.view.distribution)).c_str(),
              r.view.switches ? ", switch tree given" : "");
  std::printf("world %s = tp%d x cp%d x dp%d x pp%d; ep%d inside %s; TP groups %s\n\n",
              plural(l.world(), "rank").c_str(), l.tp(), l.cp(), l.dp(), l.pp(), l.ep(),
              l.cp() > 1 ? "dp x cp" : "dp",
              r.aware.tp_domain_local ? "each inside one NVLink domain"
                                      : "NOT all inside one NVLink domain");
  auto row = [&](int rank) {
    const RankCoord c = l.coord(rank);
    const TaskSlot s = r.aware.slot_of_rank[rank];
    std::printf("%6d %6d %-12s %5d %4d %4d %4d %4d %4d\n", rank, r.aware.task_of_rank[rank],
                r.view.nodes[s.node].c_str(), s.local, c.tp, c.cp, c.ep, c.dp, c.pp);
  };
  std::printf("%6s %6s %-12s %5s %4s %4s %4s %4s %4s\n", "rank", "task", "node", "local", "tp",
              "cp", "ep", "dp", "pp");
  if (full) {
    for (int rank = 0; rank < l.world(); ++rank) row(rank);
  } else {  // the first node's ranks and the last rank: the pattern, not 1,024 lines
    const int head = std::min(l.world(), r.view.gpus_per_node);
    for (int rank = 0; rank < head; ++rank) row(rank);
    std::printf("%6s (%d more ranks; --ranks prints every one)\n", "...", l.world() - head - 1);
    row(l.world() - 1);
  }
  std::printf("\ngroups (members in ring order):\n");
  for (Axis axis : kAllAxes) {
    std::vector<std::vector<int>> groups = l.groups(axis);
    std::printf("  %-9s %zu groups of %d:", std::string(axis_name(axis)).c_str(), groups.size(),
                l.group_size(axis));
    if (l.group_size(axis) == 1) {
      std::printf(" (each rank alone)\n");
      continue;
    }
    const size_t shown = full ? groups.size() : std::min(groups.size(), kSummaryGroups);
    for (size_t gi = 0; gi < shown; ++gi) {
      const std::vector<int>& g = groups[gi];
      std::string text = " [";
      for (size_t i = 0; i < g.size(); ++i) text += (i ? " " : "") + std::to_string(g[i]);
      std::printf("%s]", text.c_str());
    }
    if (shown < groups.size()) std::printf(" ... (%zu more)", groups.size() - shown);
    std::printf("\n");
  }
  const StepSizes& z = r.sizes;
  std::printf("\nbytes per training step by link class (%.3g params, hidden %d, %d layers, "
              "seq_len %d, micro_batch %d, %d micro-batches, %d bytes/element):\n",
              z.params, z.hidden, z.layers, z.seq_len, z.micro_batch, z.grad_accum,
              z.bytes_per_element);
  std::printf("  %-14s %18s %18s\n", "link class", "topology-aware", "Slurm task order");
  for (int c = 0; c < kNumLinkClasses; ++c) {
    std::printf("  %-14s %18s %18s\n",
                std::string(link_class_name(static_cast<LinkClass>(c))).c_str(),
                gigabytes(r.aware_cost.total.bytes[c]).c_str(),
                gigabytes(r.slurm_cost.total.bytes[c]).c_str());
  }
  const LinkSpeeds speeds;
  char aware[32];
  char slurm[32];
  std::snprintf(aware, sizeof aware, "%.4f s", link_seconds(r.aware_cost.total, speeds));
  std::snprintf(slurm, sizeof slurm, "%.4f s", link_seconds(r.slurm_cost.total, speeds));
  std::printf("  %-14s %18s %18s   (bytes / link speed: %.0f, %.0f, %.1f GB/s)\n", "link time",
              aware, slurm, speeds.intra_node / 1e9, speeds.inter_node / 1e9,
              speeds.inter_switch / 1e9);
}

}  // namespace

void register_layout(CLI::App& app, CommandResult* result) {
  auto args = std::make_shared<LayoutArgs>();
  CLI::App* sub = app.add_subcommand(
      "layout",
      "Show how a --partrain spec lays out on an allocation: the rank table, the groups "
      "per axis and the bytes per step crossing each link class");
  sub->add_option("--partrain", args->spec,
                  "The parallel layout, e.g. tp4,pp2 (items: tpN ppN dpN epN cpN zero0..3 "
                  "sp nosp sched=NAME[:V] mb=M)")
      ->required();
  sub->add_option("--nodes", args->nodes, "Number of nodes in the allocation (named n1..nN "
                                          "unless --nodelist is given)");
  sub->add_option("--gpus-per-node", args->gpus_per_node, "GPUs on each node")->required();
  sub->add_option("--nvlink-domain", args->nvlink_domain,
                  "GPUs per NVLink domain; TP groups never leave one. Default: the whole node");
  sub->add_option("--distribution", args->distribution,
                  "Slurm task distribution over nodes, block or cyclic. Default: block");
  sub->add_option("--topology", args->topology,
                  "Slurm topology.conf (topology/tree form: SwitchName=s1 Nodes=n[1-4]); "
                  "DP groups then prefer one leaf switch and PP crosses switches");
  sub->add_option("--nodelist", args->nodelist,
                  "Node names in SLURM_JOB_NODELIST form, e.g. n[1-4,7]. Default: n1..nN");
  sub->add_option("--tasks-per-node", args->tasks_per_node,
                  "Tasks per node in SLURM_TASKS_PER_NODE form, e.g. 8(x3),4. Default: "
                  "--gpus-per-node on every node");
  sub->add_option("--params", args->sizes.params,
                  "Cost model: dense parameter count. Default: 1.3e9");
  sub->add_option("--expert-params", args->sizes.expert_params,
                  "Cost model: parameters in all experts together. Default: 0");
  sub->add_option("--hidden", args->sizes.hidden, "Cost model: hidden size. Default: 2048");
  sub->add_option("--layers", args->sizes.layers, "Cost model: transformer layers. Default: 24");
  sub->add_option("--seq-len", args->sizes.seq_len,
                  "Cost model: tokens per sequence. Default: 2048");
  sub->add_option("--micro-batch", args->sizes.micro_batch,
                  "Cost model: sequences per micro-batch. Default: 1");
  sub->add_option("--grad-accum", args->grad_accum,
                  "Cost model: micro-batches per step. Default: the spec's mb=, else 8");
  sub->add_flag("--json", args->json, "Print one JSON object instead of tables");
  sub->add_flag("--ranks", args->ranks,
                "Print every rank and group (default: all of them up to 64 ranks, a summary above)");
  sub->callback([args, result] {
    // !(x >= 0) also refuses nan; inf is no parameter count either.
    if (!(args->sizes.params >= 0) || !(args->sizes.expert_params >= 0) || std::isinf(args->sizes.params) ||
        std::isinf(args->sizes.expert_params) || args->sizes.hidden < 1 ||
        args->sizes.layers < 1 || args->sizes.seq_len < 1 || args->sizes.micro_batch < 1 ||
        args->grad_accum < 0) {
      std::fprintf(stderr, "partrain: the cost-model sizes (--params, --expert-params, --hidden, --layers, "
                           "--seq-len, --micro-batch, --grad-accum) must be positive finite numbers\n");
      result->exit_code = kExitUsage;
      return;
    }
    Result<Report> report = compute(*args);
    if (!report.is_ok()) {
      std::fprintf(stderr, "%s\n", report.status().message().c_str());
      result->exit_code = exit_code_for(report.status());
      return;
    }
    if (args->json) {
      print_json(*report);
    } else {
      print_text(*report, args->ranks);
    }
    result->exit_code = kExitOk;
  });
}

}  // namespace partrain::cli
