// Submit-time view of the allocation and the spec check (see submit_check.h).
#include "submit_check.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "layout/validate.h"

namespace partrain::spank {
namespace {

std::optional<int> parse_count(std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// "2" or "2-2" -> 2; "2-4" (a range the scheduler picks from) -> unknown.
std::optional<int> parse_nodes(std::string_view text) {
  const size_t dash = text.find('-');
  if (dash == std::string_view::npos) return parse_count(text);
  std::optional<int> lo = parse_count(text.substr(0, dash));
  std::optional<int> hi = parse_count(text.substr(dash + 1));
  if (lo && hi && *lo == *hi) return lo;
  return std::nullopt;
}

// "4" or "a100:4" -> 4.
std::optional<int> parse_gpus(std::string_view text) {
  const size_t colon = text.rfind(':');
  return parse_count(colon == std::string_view::npos ? text : text.substr(colon + 1));
}

// "gpu:4", "gpu:a100:4", "shard:2,gpu:1" -> the gpu count; absent -> unknown.
std::optional<int> parse_gres(std::string_view text) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(start, comma - start);
    if (item == "gpu") return 1;
    if (item.rfind("gpu:", 0) == 0) return parse_gpus(item.substr(4));
    start = comma + 1;
  }
  return std::nullopt;
}

// Short options of sbatch/salloc/srun that take a value (so "-J name" is not mistaken for
// the script).
bool short_takes_value(char c) { return std::strchr("AaBbCcDdeFGiJLMmNnopqSTtwx", c) != nullptr; }

// Long options that take a value, for the "--opt VALUE" form.
bool long_takes_value(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "nodes", "ntasks", "ntasks-per-node", "gpus-per-node", "gres", "account", "job-name",
      "partition", "time", "output", "error", "input", "chdir", "qos", "constraint",
      "dependency", "nodelist", "exclude", "distribution", "cpus-per-task", "mem",
      "mem-per-cpu", "mem-per-gpu", "gpus", "gpus-per-task", "cpus-per-gpu", "export",
      "reservation", "begin", "array", "licenses", "signal", "comment", "mail-type",
      "mail-user", "wckey", "partrain", "ntasks-per-core", "ntasks-per-socket", "ntasks-per-gpu",
      "mincpus", "cores-per-socket", "sockets-per-node", "threads-per-core", "extra-node-info",
      "gpus-per-socket", "tres-per-task"};
  for (std::string_view n : kNames) {
    if (n == name) return true;
  }
  return false;
}

void apply(AllocationFacts* f, std::string_view name, std::string_view value) {
  if (name == "N" || name == "nodes") {
    f->nodes = parse_nodes(value);
  } else if (name == "n" || name == "ntasks") {
    f->tasks = parse_count(value);
  } else if (name == "ntasks-per-node") {
    f->tasks_per_node = parse_count(value);
  } else if (name == "gpus-per-node") {
    f->gpus_per_node = parse_gpus(value);
  } else if (name == "D" || name == "chdir") {
    f->chdir = std::string(value);
  } else if (name == "gres") {
    if (std::optional<int> g = parse_gres(value)) {
      f->gpus_per_node = g;
    } else if (value.find("gpu") != std::string_view::npos) {
      f->tasks_open = true;
    }
  } else if (name == "c" || name == "cpus-per-task" || name == "exclusive" || name == "O" ||
             name == "overcommit" || name == "ntasks-per-core" || name == "ntasks-per-socket" ||
             name == "ntasks-per-gpu" || name == "mincpus" || name == "cores-per-socket" ||
             name == "sockets-per-node" || name == "threads-per-core" || name == "B" ||
             name == "extra-node-info" || name == "G" || name == "gpus" || name == "gpus-per-task" ||
             name == "gpus-per-socket" || name == "tres-per-task" || name == "cpus-per-gpu") {
    f->tasks_open = true;
  }
}

}  // namespace

AllocationFacts scan_options(const std::vector<std::string>& args, std::string* operand,
                             AllocationFacts base) {
  AllocationFacts f = base;
  operand->clear();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--") {
      if (i + 1 < args.size()) *operand = args[i + 1];
      break;
    }
    if (a.size() < 2 || a[0] != '-') {
      *operand = std::string(a);
      break;
    }
    if (a[1] == '-') {  // --name=value or --name value
      std::string_view body = a.substr(2);
      const size_t eq = body.find('=');
      if (eq != std::string_view::npos) {
        apply(&f, body.substr(0, eq), body.substr(eq + 1));
      } else if (long_takes_value(body) && i + 1 < args.size()) {
        apply(&f, body, args[++i]);
      } else {
        apply(&f, body, "");  // a flag: --exclusive, --overcommit
      }
      continue;
    }
    // -N2, -N 2, or a cluster of flags such as -vv (-O among them).
    const char c = a[1];
    if (short_takes_value(c)) {
      std::string_view value;
      if (a.size() > 2) {
        value = a.substr(2);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      }
      apply(&f, std::string_view(&a[1], 1), value);
    } else if (a.find('O') != std::string_view::npos) {
      apply(&f, "O", "");
    }
  }
  return f;
}

std::vector<std::string> sbatch_directives(std::string_view script) {
  std::vector<std::string> out;
  size_t start = 0;
  bool first = true;
  while (start < script.size()) {
    size_t end = script.find('\n', start);
    if (end == std::string_view::npos) end = script.size();
    std::string_view line = script.substr(start, end - start);
    start = end + 1;
    if (first && line.rfind("#!", 0) == 0) {
      first = false;
      continue;
    }
    first = false;
    size_t lead = line.find_first_not_of(" \t\r");
    if (lead == std::string_view::npos) continue;  // blank
    line = line.substr(lead);
    if (line.front() != '#') break;  // the first command ends the directives
    if (line.rfind("#SBATCH", 0) != 0) continue;
    std::string_view rest = line.substr(7);
    if (!rest.empty() && rest.front() != ' ' && rest.front() != '\t') continue;
    // Words up to a trailing comment, as sbatch reads them.
    size_t i = 0;
    while (i < rest.size()) {
      while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t' || rest[i] == '\r')) ++i;
      if (i >= rest.size() || rest[i] == '#') break;
      size_t w = i;
      while (i < rest.size() && rest[i] != ' ' && rest[i] != '\t' && rest[i] != '\r') ++i;
      out.emplace_back(rest.substr(w, i - w));
    }
  }
  return out;
}

std::optional<int> world_size(const AllocationFacts& f) {
  std::optional<int> tasks = f.tasks;
  if (!tasks && f.nodes && f.tasks_per_node) tasks = *f.nodes * *f.tasks_per_node;
  const int gpus = f.gpus_per_node.value_or(0);
  if (f.nodes && gpus > 0) {
    const int devices = *f.nodes * gpus;
    if (!tasks || *tasks == *f.nodes || *tasks == devices) return devices;
  }
  if (!tasks && f.nodes && !f.gpus_per_node && !f.tasks_open) return *f.nodes;  // one task per node
  return tasks;
}

Status check_spec(const ParallelSpec& spec, const AllocationFacts& facts, const PluginArgs& args) {
  ClusterFacts cluster;
  // An unknown world is replaced by the smallest one the spec itself allows, so only the
  // spec's own consistency (explicit dp, ep | dp) and the NVLink bound are checked.
  const long long stand_in = 1LL * spec.tp * spec.cp * spec.pp * spec.dp.value_or(spec.ep);
  const std::optional<int> world = world_size(facts);
  cluster.world = world ? *world : static_cast<int>(std::min<long long>(stand_in, 1 << 30));
  cluster.gpus_per_node = facts.gpus_per_node.value_or(0);
  cluster.nvlink_domain = args.nvlink_domain;
  Status s = validate(spec, cluster);
  if (!s.is_ok() && world && !facts.tasks && !facts.tasks_per_node && !facts.gpus_per_node) {
    // The world came from Slurm's default, not from an option the user typed: say so.
    return Status::invalid(s.message() + " (the job has " + std::to_string(*world) + " node" +
                           (*world == 1 ? "" : "s") + " x 1 task, Slurm's default without -n or "
                           "--ntasks-per-node)");
  }
  return s;
}

}  // namespace partrain::spank
