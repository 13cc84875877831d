// `partrain plan`: before launch, what every device of a layout needs and how fast the
// layout runs, from the job file and a hardware profile (daemon/planner/, formulas in
// partrain-plan(1)).
//
//   partrain plan JOB.toml --partrain=SPEC --nodes N --gpus-per-node G --hardware PROFILE
//                 [--json] [--search [--top K]] [--explain] [--auto] [--hardware-dir DIR]
//                 [--threads N]
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <omp.h>

#include "cli/commands.h"
#include "common/cli_checks.h"
#include "common/cpu_budget.h"
#include "common/exit_codes.h"
#include "cli/fail.h"
#include "config/job_config.h"
#include "config/site_config.h"
#include "engine/io/json.h"
#include "planner/auto_layout.h"
#include "planner/plan.h"

namespace partrain::cli {
namespace {

using planner::Plan;

struct PlanArgs {
  std::string job, spec, hardware, hardware_dir;
  int nodes = 1, gpus_per_node = 0;
  bool json = false, search = false, explain = false, automatic = false;
  int top = 5;
  int threads = 0;  // --threads; 0: thread_count()'s default
};

const char* recompute_name(engine::Recompute r) {
  return r == engine::Recompute::kNone ? "none"
         : r == engine::Recompute::kSelective ? "selective" : "full";
}

std::string bytes_text(double b) {
  char buf[32];
  if (b >= 1e3 * (1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  }
  return buf;
}

std::string num(double v, const char* fmt = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string quoted(const std::string& s) {
  std::string out;
  engine::io::append_json_string(s, &out);
  return out;
}

const char* dtype_name(int bytes) { return bytes == 2 ? "bf16" : "fp32"; }

// Activations of the plan's layout under each recompute mode, without and with
// sequence parallelism (the latter only means something with tp > 1).
struct ActivationRow {
  engine::Recompute mode;
  double no_sp, sp;
};
std::vector<ActivationRow> activation_table(const Plan& p, const planner::HardwareProfile& hw) {
  std::vector<ActivationRow> rows;
  for (engine::Recompute r : {engine::Recompute::kNone, engine::Recompute::kSelective,
                              engine::Recompute::kFull}) {
    planner::ModelDims m = p.model;
    m.recompute = r;
    planner::PlanLayout l = p.layout;
    l.sp = false;
    const double off = planner::stage_memory(m, l, p.precision, hw.fragmentation, hw.reserved_bytes,
                                             p.memory.stage).activations;
    l.sp = true;
    const double on = planner::stage_memory(m, l, p.precision, hw.fragmentation, hw.reserved_bytes,
                                            p.memory.stage).activations;
    rows.push_back({r, off, on});
  }
  return rows;
}

std::string json_links(const LinkBytes& b) {
  std::string out = "{";
  for (int c = 0; c < kNumLinkClasses; ++c) {
    out += quoted(std::string(link_class_name(static_cast<LinkClass>(c)))) + ":" +
           num(b.bytes[c], "%.0f") + ",";
  }
  return out + "\"total\":" + num(b.total(), "%.0f") + "}";
}

// One rank's memory: "stage":0,"in_flight_micro_batches":..,"weights":.. (no braces).
std::string json_breakdown(const planner::MemoryBreakdown& m) {
  return "\"stage\":" + std::to_string(m.stage) + ",\"in_flight_micro_batches\":" + num(m.in_flight) +
         ",\"params_on_rank\":" + num(m.params, "%.0f") +
         ",\"weights\":" + num(m.weights, "%.0f") + ",\"grads\":" + num(m.grads, "%.0f") +
         ",\"optimizer\":" + num(m.optimizer, "%.0f") +
         ",\"activations\":" + num(m.activations, "%.0f") +
         ",\"workspace\":" + num(m.workspace, "%.0f") +
         ",\"comm_buffers\":" + num(m.comm_buffers, "%.0f") + ",\"margin\":" + num(m.margin, "%.0f") +
         ",\"reserved\":" + num(m.reserved, "%.0f") +
         ",\"engine_total\":" + num(m.engine_total(), "%.0f") + ",\"total\":" + num(m.total(), "%.0f");
}

std::string json_plan(const Plan& p, const planner::HardwareProfile& hw) {
  const planner::MemoryBreakdown& m = p.memory;
  const planner::StepTime& t = p.time;
  std::string out = "{\"spec\":" + quoted(p.spec.to_string()) +
                    ",\"world\":" + std::to_string(p.layout.world()) +
                    ",\"tp\":" + std::to_string(p.layout.tp) + ",\"pp\":" + std::to_string(p.layout.pp) +
                    ",\"dp\":" + std::to_string(p.layout.dp) + ",\"ep\":" + std::to_string(p.layout.ep) +
                    ",\"zero\":" + std::to_string(p.layout.zero) +
                    ",\"sequence_parallel\":" + (p.layout.sp ? "true" : "false") +
                    ",\"recompute\":" + quoted(recompute_name(p.model.recompute)) +
                    ",\"parameters\":" + num(p.params.total, "%.0f") +
                    ",\"micro_batch\":" + std::to_string(p.layout.micro_batch) +
                    ",\"grad_accum\":" + std::to_string(p.layout.grad_accum) +
                    ",\"global_batch\":" + std::to_string(p.global_batch) +
                    ",\"bubble\":" + num(p.bubble);
  out += ",\"memory\":{" + json_breakdown(m) + ",\"capacity\":" + num(p.capacity, "%.0f") +
         ",\"fits\":" + (p.fits ? "true" : "false") + ",\"stages\":[";
  for (size_t i = 0; i < p.stages.size(); ++i) {
    out += std::string(i > 0 ? "," : "") + "{" + json_breakdown(p.stages[i]) + "}";
  }
  out += "],\"activations_by_recompute\":{";
  bool first = true;
  for (const ActivationRow& r : activation_table(p, hw)) {
    out += std::string(first ? "" : ",") + quoted(recompute_name(r.mode)) + ":{\"no_sp\":" +
           num(r.no_sp, "%.0f") + ",\"sp\":" + num(r.sp, "%.0f") + "}";
    first = false;
  }
  out += "}},\"traffic\":{\"unit\":\"bytes per step, whole cluster\",\"links\":" +
         json_links(p.traffic.total);
  const std::pair<const char*, const LinkBytes*> axes[] = {
      {"tp", &p.traffic.tp}, {"cp", &p.traffic.cp}, {"ep", &p.traffic.ep},
      {"dp", &p.grad_traffic.dp}, {"pp", &p.traffic.pp}};
  for (const auto& [name, bytes] : axes) out += std::string(",") + quoted(name) + ":" + json_links(*bytes);
  out += "},\"time\":{\"compute\":" + num(t.compute) + ",\"tp\":" + num(t.tp) +
         ",\"cp\":" + num(t.cp) + ",\"ep\":" + num(t.ep) + ",\"pp\":" + num(t.pp) + ",\"bubble\":" + num(t.bubble) +
         ",\"dp\":" + num(t.dp) + ",\"dp_exposed\":" + num(t.dp_exposed) +
         ",\"optimizer\":" + num(t.optimizer) + ",\"step\":" + num(t.total) +
         ",\"tokens_per_s\":" + num(t.tokens_per_s) +
         ",\"tokens_per_s_per_gpu\":" + num(t.tokens_per_s_per_gpu) + ",\"mfu\":" + num(t.mfu) +
         ",\"model_flops_per_gpu\":" + num(t.model_flops_per_gpu) +
         ",\"hardware_flops_per_gpu\":" + num(t.hardware_flops_per_gpu) + "}";
  out += ",\"runnable\":" + std::string(p.runnable.is_ok() ? "true" : "false") +
         ",\"not_runnable_because\":" + quoted(p.runnable.is_ok() ? "" : p.runnable.message()) + "}";
  return out;
}

// Pipelines: each stage's rank (the one holding most: tp rank 0), what it holds and keeps.
void print_stages(const Plan& p) {
  const planner::PlanLayout& l = p.layout;
  const int v = std::max(1, l.virtual_stages), stages = l.pp * v;
  std::printf("\nper pipeline stage (blocks as the runtime partitions them%s):\n",
              v > 1 ? (", " + std::to_string(v) + " chunks per rank").c_str() : "");
  std::vector<std::string> labels;
  size_t width = 0;
  for (const planner::MemoryBreakdown& s : p.stages) {
    std::string holds = "stage " + std::to_string(s.stage) + ":";
    for (int c = 0; c < v && static_cast<int>(l.stage_bounds.size()) == stages + 1; ++c) {
      const size_t k = static_cast<size_t>(c * l.pp + s.stage);
      const int b0 = l.stage_bounds[k], b1 = l.stage_bounds[k + 1];
      holds += std::string(c > 0 ? "," : "") + (b1 - b0 == 1 ? " block " + std::to_string(b0)
                                                             : " blocks " + std::to_string(b0) + "-" +
                                                                   std::to_string(b1 - 1));
    }
    if (s.stage == 0) holds += " + embedding";
    if (s.stage == l.pp - 1) holds += p.model.tied ? " + head (tied copy)" : " + head";
    width = std::max(width, holds.size());
    labels.push_back(holds);
  }
  const int w = static_cast<int>(width);
  std::printf("  %-*s %9s %20s %14s %14s\n", w, "", "in flight", "weights+grads+optim", "activations",
              "total");
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const planner::MemoryBreakdown& s = p.stages[i];
    std::printf("  %-*s %9.3g %20s %14s %14s%s\n", w, labels[i].c_str(), s.in_flight,
                bytes_text(s.weights + s.grads + s.optimizer).c_str(), bytes_text(s.activations).c_str(),
                bytes_text(s.total()).c_str(), s.stage == p.memory.stage ? "  <- most" : "");
  }
}

void print_plan(const Plan& p, const config::JobConfig& job, const PlanArgs& a,
                const planner::HardwareProfile& hw) {
  const planner::PlanLayout& l = p.layout;
  const planner::MemoryBreakdown& m = p.memory;
  const bool billions = p.params.total >= 1e9;
  std::printf("partrain plan: %s (%s, %.4g%s parameters) as %s on %d node(s) x %d, profile %s\n",
              job.name.c_str(), p.model.gpt2 ? "gpt2" : "llama",
              p.params.total / (billions ? 1e9 : 1e6), billions ? "B" : "M",
              p.spec.to_string().c_str(), a.nodes, a.gpus_per_node, hw.name.c_str());
  std::printf("global batch %lld = micro_batch %d x grad_accum %d x dp %d; pipeline bubble %.1f%%"
              " (p=%d, m=%d%s)\n\n",
              static_cast<long long>(p.global_batch), l.micro_batch, l.grad_accum, l.dp,
              100 * p.bubble, l.pp, l.grad_accum,
              l.virtual_stages > 1 ? (", v=" + std::to_string(l.virtual_stages)).c_str() : "");
  std::printf("memory per device (pipeline stage %d, %.3g micro-batch(es) in flight):\n", m.stage,
              m.in_flight);
  const std::string w = std::string(dtype_name(p.precision.param_bytes));
  auto row = [](const char* what, const std::string& note, double b) {
    std::printf("  %-22s %-36s %14s\n", what, note.c_str(), bytes_text(b).c_str());
  };
  row("weights", w + (l.zero >= 3 ? ", sharded over dp (zero3)" : ""), m.weights);
  row("gradients", std::string(dtype_name(p.precision.grad_bytes)) +
                       (l.zero >= 2 ? ", sharded over dp (zero2+)" : ""), m.grads);
  row("optimizer state", std::string(p.precision.master_weights ? "fp32 master + m + v" : "fp32 m + v") +
                             (l.zero >= 1 ? ", sharded (zero" + std::to_string(l.zero) + ")" : ""),
      m.optimizer);
  row("activations", std::string("recompute ") + recompute_name(p.model.recompute) +
                         (l.sp ? ", sequence parallel" : ""), m.activations);
  row("workspace", "backward scratch", m.workspace);
  row("comm buffers", "DP buckets, ZeRO-3 gathers, PP, EP", m.comm_buffers);
  row("fragmentation margin", num(100 * hw.fragmentation, "%.0f") + "%", m.margin);
  if (m.reserved > 0) row("reserved", "context, NCCL", m.reserved);
  std::printf("  %-22s %-36s %14s of %s: %s\n", "total", "", bytes_text(m.total()).c_str(),
              bytes_text(p.capacity).c_str(), p.fits ? "fits" : "DOES NOT FIT");
  if (p.stages.size() > 1) print_stages(p);
  std::printf("\nactivations by recompute mode   %14s %14s\n", "no SP", "with SP");
  for (const ActivationRow& r : activation_table(p, hw)) {
    std::printf("  %-29s %14s %14s\n", recompute_name(r.mode), bytes_text(r.no_sp).c_str(),
                l.tp > 1 ? bytes_text(r.sp).c_str() : "(tp1)");
  }
  std::printf("\nbytes per step (whole cluster)   intra-node     inter-node   inter-switch\n");
  const std::pair<const char*, const LinkBytes*> axes[] = {
      {"tp", &p.traffic.tp}, {"cp", &p.traffic.cp}, {"ep", &p.traffic.ep},
      {"dp", &p.grad_traffic.dp}, {"pp", &p.traffic.pp}};
  for (const auto& [name, b] : axes) {
    std::printf("  %-29s %12s %14s %14s\n", name, bytes_text((*b)[LinkClass::kIntraNode]).c_str(),
                bytes_text((*b)[LinkClass::kInterNode]).c_str(),
                bytes_text((*b)[LinkClass::kInterSwitch]).c_str());
  }
  const planner::StepTime& t = p.time;
  std::printf("\npredicted step %.4g s: compute %.4g, tp %.3g, cp %.3g, ep %.3g, pp %.3g, "
              "bubble %.3g, dp %.3g (exposed %.3g), optimizer %.3g\n",
              t.total, t.compute, t.tp, t.cp, t.ep, t.pp, t.bubble, t.dp, t.dp_exposed, t.optimizer);
  std::printf("%.4g tokens/s, %.4g tokens/s/GPU, MFU %.1f%% (%.4g TFLOP/s/GPU model, %.4g with "
              "recompute)\n",
              t.tokens_per_s, t.tokens_per_s_per_gpu, 100 * t.mfu, t.model_flops_per_gpu / 1e12,
              t.hardware_flops_per_gpu / 1e12);
  if (p.runnable.is_ok()) {
    std::printf("this version runs it on %s ranks\n", hw.kind == "cpu" ? "CPU" : "GPU");
  } else {
    std::printf("this version does not run it yet: %s\n", p.runnable.message().c_str());
  }
}


// --explain: the choice, then why each other layout lost: on time (the next fastest that
// fit), on memory or on what this version runs (those that would have been faster), and
// how many the layout core refuses for this job.
int print_explain(const planner::SearchResult& found, const config::JobConfig& job, const PlanArgs& a,
                  const planner::Cluster& cluster, const planner::HardwareProfile& hw) {
  const size_t k = static_cast<size_t>(std::max(1, a.top));
  std::printf("partrain plan --explain: %s on %d node(s) x %d, profile %s: %d layouts considered, %zu fit and run, "
              "%zu valid but rejected, %zu invalid for this job\n",
              job.name.c_str(), a.nodes, cluster.gpus_per_node, hw.name.c_str(), found.considered,
              found.fits.size(), found.rejected.size(), found.invalid.size());
  if (found.fits.empty()) {
    std::printf("no layout fits and runs\n");
  } else {
    const Plan& w = found.fits.front();
    std::printf("\nchosen: %s: %.4g s per step, %s per device; %s\n", planner::describe(w).c_str(), w.time.total,
                bytes_text(w.memory.total()).c_str(),
                planner::why_it_wins(w, found.fits.size() > 1 ? &found.fits[1] : nullptr).c_str());
    if (found.fits.size() > 1) std::printf("\nlost on time (fit and run), the next %zu:\n", std::min(k, found.fits.size() - 1));
    for (size_t i = 1; i < found.fits.size() && i <= k; ++i) {
      std::printf("  %-66s %s\n", planner::describe(found.fits[i]).c_str(),
                  planner::why_it_loses(found.fits[i], w).c_str());
    }
    size_t shown = 0;
    for (const Plan& p : found.rejected) {
      if (p.time.tokens_per_s <= w.time.tokens_per_s || shown == k) continue;
      if (shown++ == 0) std::printf("\nfaster on paper, rejected:\n");
      std::printf("  %-66s %.4g s per step, but %s\n", planner::describe(p).c_str(), p.time.total,
                  planner::why_it_loses(p, w).c_str());
    }
  }
  for (size_t i = 0; i < found.invalid.size() && i < 3; ++i) {
    if (i == 0) std::printf("\ninvalid for this job, e.g.:\n");
    std::printf("  --partrain=%s: %s\n", found.invalid[i].first.c_str(), found.invalid[i].second.c_str());
  }
  return kExitOk;
}

int run_plan(const PlanArgs& a) {
  omp_set_num_threads(thread_count(a.threads));
  Result<planner::HardwareProfile> hw = planner::load_hardware(a.hardware, a.hardware_dir);
  if (!hw) return fail(hw.status());
  Result<config::SiteConfig> site = config::load_site_config("");
  if (!site) return fail(site.status());
  config::Overrides cli;
  if (!a.spec.empty()) cli.spec = a.spec;
  Result<config::JobConfig> job = config::resolve_job(a.job, *site, cli);
  if (!job) return fail(job.status());
  planner::Cluster cluster{a.nodes, a.gpus_per_node > 0 ? a.gpus_per_node : hw->gpus_per_node};
  PlanArgs shown = a;
  shown.gpus_per_node = cluster.gpus_per_node;
  if (!a.search && !a.explain && !a.automatic) {
    Result<Plan> plan = planner::make_plan(*job, cluster, *hw);
    if (!plan) return fail(plan.status());
    if (a.json) {
      std::printf("%s\n", json_plan(*plan, *hw).c_str());
    } else {
      print_plan(*plan, *job, shown, *hw);
    }
    return kExitOk;
  }
  if (a.automatic) {
    Result<planner::AutoChoice> choice = planner::choose_layout(*job, cluster, *hw);
    if (!choice) return fail(choice.status());
    if (a.json) {
      std::printf("{\"spec\":%s,\"runner_up\":%s,\"considered\":%d,\"fitting\":%d,\"plan\":%s}\n",
                  quoted(choice->chosen.spec.to_string()).c_str(),
                  quoted(choice->runner_up ? choice->runner_up->spec.to_string() : "").c_str(), choice->considered,
                  choice->fitting, json_plan(choice->chosen, *hw).c_str());
    } else {
      for (const std::string& line : planner::describe_choice(*choice)) std::printf("%s\n", line.c_str());
    }
    return kExitOk;
  }
  const planner::SearchResult found = planner::search_layouts(*job, cluster, *hw);
  const std::vector<Plan>& plans = found.fits;
  const int considered = found.considered;
  if (a.explain) return print_explain(found, *job, a, cluster, *hw);
  const size_t shown_count = std::min(plans.size(), static_cast<size_t>(std::max(1, a.top)));
  if (a.json) {
    std::string out = "{\"considered\":" + std::to_string(considered) +
                      ",\"fitting\":" + std::to_string(plans.size()) + ",\"top\":[";
    for (size_t i = 0; i < shown_count; ++i) {
      out += std::string(i ? ",\n" : "\n") + "{\"rank\":" + std::to_string(i + 1) +
             ",\"why\":" + quoted(planner::why_it_wins(plans[i], i + 1 < plans.size() ? &plans[i + 1] : nullptr)) +
             ",\"plan\":" + json_plan(plans[i], *hw) + "}";
    }
    std::printf("%s]}\n", out.c_str());
    return kExitOk;
  }
  std::printf("partrain plan --search: %s on %d node(s) x %d, profile %s: %d layouts considered, "
              "%zu valid, fitting and runnable on its devices\n",
              job->name.c_str(), a.nodes, cluster.gpus_per_node, hw->name.c_str(), considered,
              plans.size());
  if (plans.empty()) {
    std::printf("no layout this version runs on these devices fits; use more devices, a smaller "
                "micro_batch or seq_len, or a smaller model\n");
    return kExitOk;
  }
  std::printf("%3s %-66s %11s %11s %6s %10s\n", "#", "layout", "tokens/s", "step", "MFU", "memory");
  for (size_t i = 0; i < shown_count; ++i) {
    const Plan& p = plans[i];
    std::printf("%3zu %-66s %11.4g %9.4g s %5.1f%% %10s\n", i + 1, planner::describe(p).c_str(),
                p.time.tokens_per_s, p.time.total, 100 * p.time.mfu, bytes_text(p.memory.total()).c_str());
    std::printf("    why: %s\n",
                planner::why_it_wins(p, i + 1 < plans.size() ? &plans[i + 1] : nullptr).c_str());
  }
  return kExitOk;
}

}  // namespace

void register_plan(CLI::App& app, CommandResult* result) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "predict memory per device and step time of a layout before launch (partrain-plan(1))");
  cmd->add_option("job", args->job, "job file (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--partrain", args->spec, "parallel layout, e.g. tp4,pp2,zero1 (over [parallelism])");
  cmd->add_option("--nodes", args->nodes, "nodes in the allocation (default: 1)");
  cmd->add_option("--gpus-per-node", args->gpus_per_node,
                  "devices (CPU: ranks) per node (default: the profile's)");
  cmd->add_option("--hardware", args->hardware,
                  "profile name (A100-40GB, A100-80GB, H100-SXM, H200-SXM, cpu) or a profile file")
      ->required();
  cmd->add_option("--hardware-dir", args->hardware_dir,
                  "folder of profiles (default: $PARTRAIN_HARDWARE_DIR, else the site config's [paths] "
                  "hardware_dir, else the installed etc/partrain/hardware)");
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->add_flag("--search", args->search,
                "rank every valid layout that fits and that this version runs on the profile's "
                "devices by predicted throughput");
  cmd->add_flag("--explain", args->explain,
                "search, then say why every other layout lost: on time (which parts of the step), "
                "on memory, or on what this version runs");
  cmd->add_flag("--auto", args->automatic,
                "choose the layout --partrain=auto would (the fastest that fits and runs, over the "
                "spec's axes, the job's recompute and micro_batch kept) and print it with the runner-up");
  cmd->add_option("--threads", args->threads,
                  "CPU threads (default: OMP_NUM_THREADS, else the CPUs this process may use: its affinity "
                  "mask within its cgroup's CPU quota)")
      ->check(cli_checks::kPositive);
  cmd->add_option("--top", args->top, "layouts shown by --search and --explain (default: 5)")
      ->check(cli_checks::kPositive);
  cmd->callback([args, result] { result->exit_code = run_plan(*args); });
}

}  // namespace partrain::cli
