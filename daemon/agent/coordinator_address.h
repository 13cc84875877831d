// How the agents of a Slurm job find the coordinator's rendezvous store without a fixed
// port: the coordinator's agent binds a free port (the site's preferred one when it is
// free) and publishes "host port" in the job's state directory, which every node of the
// allocation shares (<state_root>/slurm-<job id>); the other agents read it there. So two
// jobs, or a torchrun, on one node never collide on a port, and a port in use is never a
// reason to fail.
//
// The same folder tells whether state_root really is shared: every agent leaves a marker
// file there as it starts. An agent that cannot see the coordinator's address in time, or
// a coordinator that waited in vain for the others, looks for the markers of the other
// nodes: none at all means the folder is not shared (a configuration error, exit 2); some
// means a node is slow or gone (retryable, exit 75).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace partrain::agent {

// Names in the state directory, per job step and requeue (Slurm's step id and restart
// count), so a requeued job or another step never reads a stale address:
//   rendezvous.<step>.<restart>          "host port\n", written by the coordinator's agent
//   agent.<step>.<restart>.<node>        the marker of node <node>'s agent
std::string rendezvous_file(const std::string& state_dir, const std::string& step, const std::string& restart);
std::string agent_marker(const std::string& state_dir, const std::string& step, const std::string& restart, int node);

// Writes `path` whole (a temp file renamed into place), so a reader never sees half of it.
Status publish_coordinator(const std::string& path, const std::string& host, int port);

struct CoordinatorAddress {
  std::string host;
  int port = 0;
};

// Waits up to `timeout` for the file, listing its folder every 100 ms (a listing makes NFS
// look again, where a cached "no such file" could hide it for half a minute).
// unavailable when it never came; invalid when it holds no "host port". When it has not
// come after `slow_after`, calls `still_waiting` once (the agent then says why it may never
// come, long before the timeout ends the job).
Result<CoordinatorAddress> read_coordinator(const std::string& path, std::chrono::milliseconds timeout,
                                            std::chrono::milliseconds slow_after = std::chrono::milliseconds(0),
                                            const std::function<void()>& still_waiting = {});

// Leaves this node's marker (see above).
Status leave_marker(const std::string& path);
// How many of `paths` exist now.
int markers_seen(const std::vector<std::string>& paths);

// The kind of file system `path` is on, for messages: "nfs", "lustre", "gpfs", "ext4",
// "tmpfs", ... ("file system type 0x...." when unknown, "" when it cannot be told).
std::string filesystem_kind(const std::string& path);

// The state directory is usable by this agent: it exists, is a folder and is writable.
// invalid naming state_root and the fix otherwise.
Status check_state_dir(const std::string& state_dir);

}  // namespace partrain::agent
