// How an agent turns a Slurm node name into an address it can connect to or bind.
//
// PARTRAIN_COORDINATOR names the coordinator's node as Slurm does (n17:29517), and Slurm
// node names need not be in DNS: slurm.conf's NodeAddr= is how Slurm itself reaches a node
// (test clusters put several nodes on 127.0.0.1; sites use a management or fabric address).
// So the agent asks Slurm, not DNS: `scontrol -o show node NAME`, field NodeAddr. The SPANK
// plugin cannot do it: a task's SPANK context has no view of other nodes' addresses, and
// asking slurmctld from every task at launch would load it once per task, not per agent.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace partrain::agent {

// NodeAddr of `node` in `scontrol -o show node` output (one line per node); nullopt when
// the node or the field is absent.
std::optional<std::string> parse_node_addr(const std::string& scontrol_output,
                                           const std::string& node);

// The address of a Slurm node: `name` itself when it is a numeric IPv4/IPv6 address or
// "localhost"; else the node's NodeAddr from `scontrol` (the program given, found on PATH);
// else, when scontrol is missing, fails or does not know the node, `name` (resolved by DNS
// later), with the reason in `*why` when `why` is given. Never fails.
std::string slurm_node_address(const std::string& name, const std::string& scontrol = "scontrol",
                               std::string* why = nullptr);

}  // namespace partrain::agent
