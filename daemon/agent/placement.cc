// Where the agent stands: standalone (one node, ranks 0..N-1, store on localhost) or from
// the environment the SPANK plugin computed for a one-agent-per-node step (slurm/step_env.h:
// PARTRAIN_WORLD, PARTRAIN_NODE_RANKS, PARTRAIN_COORDINATOR, PARTRAIN_JOB_SECRET_FILE) and
// Slurm's SLURM_NODEID / SLURM_NNODES / SLURMD_NODENAME.
#include <unistd.h>

#include <charconv>
#include <map>

#include <fmt/format.h>

#include "agent/agent.h"
#include "agent/node_address.h"
#include "common/log.h"
#include "common/worker_env.h"

namespace partrain::agent {
namespace {

Result<int> parse_int(const std::string& name, const std::string& text) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0) {
    return Status::invalid(fmt::format("{}={}: need a whole number >= 0", name, text));
  }
  return v;
}

std::string hostname() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

Result<Placement> placement_from(const AgentOptions& o,
                                 const std::vector<std::pair<std::string, std::string>>& env) {
  Placement p;
  std::map<std::string, std::string> e(env.begin(), env.end());
  auto get = [&e](const std::string& k) { auto it = e.find(k); return it == e.end() ? std::string() : it->second; };
  p.node_name = get("SLURMD_NODENAME").empty() ? hostname() : get("SLURMD_NODENAME");
  if (o.standalone) {
    if (o.nproc < 1) return Status::invalid("--nproc: need at least 1 local rank with --standalone");
    p.world = o.nproc;
    for (int r = 0; r < o.nproc; ++r) p.node_ranks.push_back(r);
    p.coordinator_host = "127.0.0.1";
    return p;
  }
  for (const char* k : {"PARTRAIN_WORLD", "PARTRAIN_NODE_RANKS", "PARTRAIN_COORDINATOR"}) {
    if (get(k).empty() && !get("PARTRAIN_SPANK_ERROR").empty()) {
      // The plugin refused this step's layout and said why (slurm/remote.cc).
      return Status::invalid(fmt::format("the partrain SPANK plugin gave this task no ranks: {}",
                                         get("PARTRAIN_SPANK_ERROR")));
    }
    if (get(k).empty()) {
      return Status::invalid(fmt::format(
          "{} is not set: run partraind under srun with the partrain SPANK plugin "
          "(srun --partrain=SPEC --ntasks-per-node=1 partraind JOB.toml), or use "
          "--standalone --nproc N on one machine", k));
    }
  }
  Result<int> world = parse_int("PARTRAIN_WORLD", get("PARTRAIN_WORLD"));
  if (!world) return world.status();
  p.world = *world;
  const std::string list = get("PARTRAIN_NODE_RANKS");
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    Result<int> r = parse_int("PARTRAIN_NODE_RANKS", list.substr(start, comma - start));
    if (!r) return r.status();
    if (*r >= p.world) {
      return Status::invalid(fmt::format("PARTRAIN_NODE_RANKS={}: rank {} is not below "
                                         "PARTRAIN_WORLD={}", list, *r, p.world));
    }
    p.node_ranks.push_back(*r);
    start = comma + 1;
  }
  const std::string coord = get("PARTRAIN_COORDINATOR");
  Result<std::pair<std::string, int>> at = parse_host_port("PARTRAIN_COORDINATOR", coord);
  if (!at) return at.status();
  p.coordinator_host = at->first;
  p.coordinator_port = at->second;
  p.secret_file = get("PARTRAIN_JOB_SECRET_FILE");
  p.state_dir = get("PARTRAIN_STATE_DIR");
  if (!get("SLURM_STEP_ID").empty()) p.step_id = get("SLURM_STEP_ID");
  if (p.state_dir.empty() && p.coordinator_port == 0) {
    return Status::invalid(fmt::format("PARTRAIN_COORDINATOR={} names no port and PARTRAIN_STATE_DIR, where the "
                                       "coordinator publishes the one it binds, is not set: run partraind under "
                                       "srun with the partrain SPANK plugin", coord));
  }
  if (!get("SLURM_NODEID").empty()) {
    Result<int> node = parse_int("SLURM_NODEID", get("SLURM_NODEID"));
    if (!node) return node.status();
    p.node = *node;
  }
  if (!get("SLURM_NNODES").empty()) {
    Result<int> n = parse_int("SLURM_NNODES", get("SLURM_NNODES"));
    if (!n) return n.status();
    p.num_nodes = *n;
  }
  if (p.node >= p.num_nodes) {
    return Status::invalid(fmt::format("SLURM_NODEID={} is not below SLURM_NNODES={}", p.node,
                                       p.num_nodes));
  }
  return p;
}

void resolve_node_addresses(Placement* p) {
  // One scontrol call per name (the coordinator's node resolves its own address once).
  auto resolve = [](const std::string& name, const char* what) {
    std::string why;
    const std::string addr = slurm_node_address(name, "scontrol", &why);
    if (!why.empty()) {
      log::warn("agent", "{} {}: {}; using the name as a host name", what, name, why);
    } else if (addr != name) {
      log::info("agent", "{} {} is at {} (Slurm NodeAddr)", what, name, addr);
    }
    return addr;
  };
  const std::string coordinator = p->coordinator_host;
  p->coordinator_host = resolve(coordinator, "coordinator node");
  p->node_addr = p->node_name == coordinator ? p->coordinator_host : resolve(p->node_name, "this node");
}

}  // namespace partrain::agent
