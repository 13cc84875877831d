// The rendezvous key space on one page: every key the agents and workers of one job write
// to and read from the rendezvous store, built here and nowhere else. Each builder says who
// writes the key, who reads it, and when.
//
// Lifetime: the store lives in the coordinator agent's memory (server.h) for one Slurm
// start of the job; none of these keys survive a requeue, so a new version may rename them
// (the agents and workers of one version only ever talk to each other). What does persist
// across a requeue is the coordinator's RocksDB state store, whose keys (`ckpt/<step>`) are
// store/state_store.cc's, not these.
//
// Two scopes:
//   job keys      one Slurm start of the job: the agents' meeting, heartbeats, abort, restarts
//   attempt keys  one worker group: under the attempt's scope, "a<SLURM_RESTART_COUNT>.<in-job
//                 restart>/" (attempt_scope()), so a restarted group never reads its
//                 predecessor's keys. The agent hands the attempt to its workers as
//                 PARTRAIN_ATTEMPT (common/worker_env.h).
//
// Example, second in-job restart of a job requeued once, rank 3's finish:
//   attempt("1", 2) = "a1.2";  finished(attempt_scope("a1.2"), 3) = "a1.2/finished/3"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace partrain::rdzv_keys {

// ---- Job keys

// Barrier name. Every node's agent arrives once at start (agent.cc meet_agents), after
// connecting; none goes on until all have. `slurm_restarts`: SLURM_RESTART_COUNT ("0").
inline std::string agents_barrier(std::string_view slurm_restarts) { return "agents/" + std::string(slurm_restarts); }

// Counter. Node `node`'s heartbeat thread adds 1 every interval (heartbeat.cc); every other
// node's heartbeat thread reads it (add 0) and declares the node lost when it stops moving.
inline std::string heartbeat(int node) { return "hb/" + std::to_string(node); }

// "1". Set by node `node`'s agent when all its ranks finished (agent.cc say_done). Read by
// the other nodes' heartbeat threads (a finished node stops beating: no loss) and waited
// for by the coordinator agent, which keeps the store up until every node said so.
inline std::string done(int node) { return "done/" + std::to_string(node); }

// The reason, "node N: ...". Set by an agent that stops the job for good: the coordinator
// when its state store will not open (agent.cc open_state_store), any agent whose workers
// failed past their restarts (supervise.cc). Read by every agent's heartbeat thread, which
// then stops its own workers.
inline std::string job_abort() { return "job/abort"; }

// The reason, "node N: ...". Set by the agent that saw a worker die while in-job restarts
// remain (supervise.cc); restart `n` counts from 1. Read by every agent's supervise loop,
// which then stops its group for restart n.
inline std::string restart(int n) { return "restart/" + std::to_string(n); }

// Barrier name. Every node's agent arrives once its group is down for restart `n`
// (agent.cc run_worker_groups), so no node starts group n before all stopped group n-1.
inline std::string restart_barrier(int n) { return "restart/" + std::to_string(n) + "/agents"; }

// ---- Attempt keys

// The attempt's name, "a<slurm_restarts>.<restarts>": chosen by each agent per worker group
// (agent.cc run_worker_groups), passed to the workers as PARTRAIN_ATTEMPT.
inline std::string attempt(std::string_view slurm_restarts, int restarts) {
  return "a" + std::string(slurm_restarts) + "." + std::to_string(restarts);
}

// The prefix of the attempt's keys, "a0.1/"; "" for no attempt (a store of its own).
inline std::string attempt_scope(std::string_view attempt) {
  return attempt.empty() ? std::string() : std::string(attempt) + "/";
}

// An encoded checkpoint or "none". Set by the coordinator agent before it spawns the group
// (agent.cc start_committer); read once by every worker at start (worker/main.cc).
inline std::string resume(std::string_view scope) { return std::string(scope) + "resume"; }

// The rank's saved pieces (rank 0's value starts with the train state). Set by each worker
// after it wrote its shards for `step` (worker/commit_requester.cc); read by the coordinator
// agent's CheckpointCommitter, which commits once every rank's is there.
inline std::string checkpoint_rank(std::string_view scope, int64_t step, int rank) {
  return std::string(scope) + "ckpt/" + std::to_string(step) + "/" + std::to_string(rank);
}

// "ok" or why the commit failed. Set by the CheckpointCommitter after committing `step`
// (agent/checkpoint_committer.cc); every worker waits for it before its save returns.
inline std::string checkpoint_ack(std::string_view scope, int64_t step) {
  return std::string(scope) + "ckpt/" + std::to_string(step) + "/ack";
}

// The step of the attempt's `n`-th save (n from 0). Set by rank 0 with its pieces
// (worker/commit_requester.cc); the CheckpointCommitter reads n = 0, 1, ... in order to
// learn which step to collect next.
inline std::string checkpoint_seq(std::string_view scope, int64_t n) {
  return std::string(scope) + "ckpt/seq/" + std::to_string(n);
}

// The rank's last step reached. Set by each worker when its run ended (worker/main.cc);
// read by its own agent's supervise loop: an exit 0 without it is a failure of the rank.
inline std::string finished(std::string_view scope, int rank) {
  return std::string(scope) + "finished/" + std::to_string(rank);
}

// The rank's GPU UUID. Set by each GPU worker before it makes its groups
// (worker/transports.cc); read by the members of its groups to choose NCCL (own GPUs) or
// the staged transport (a shared GPU).
inline std::string gpu(std::string_view scope, int rank) { return std::string(scope) + "gpu/" + std::to_string(rank); }

// A communicator group's name: axis `axis` ("tp", "dp", ...) led by global rank `first`
// (worker/process_groups.cc). Its members' communicators keep their keys under it (below).
// A group's host channel adds "h" (worker/transports.cc).
inline std::string group(std::string_view scope, std::string_view axis, int first) {
  return std::string(scope) + std::string(axis) + std::to_string(first);
}

// The pipeline channel from global rank `from` to `to`: activations forward ("ppa"),
// gradients back ("ppg") (worker/process_groups.cc).
inline std::string pp_channel(std::string_view scope, bool activation, int from, int to) {
  return std::string(scope) + (activation ? "ppa" : "ppg") + std::to_string(from) + "-" + std::to_string(to);
}

// ---- A communicator's keys, under its group name (the name carries the attempt's scope)

// The prefix of one Gloo context's keys (`which`: the context's index in the group); Gloo's
// own rendezvous sets and reads the members' addresses under it while the group forms
// (comm/gloo/gloo_communicator.cc, through gloo_store.h).
inline std::string gloo_context(std::string_view group, std::string_view which) {
  return "gloo/" + std::string(group) + "/" + std::string(which) + "/";
}

// The group's NCCL unique id: set by its first member, read by the others while the
// communicator forms (comm/nccl/nccl_communicator.cc).
inline std::string nccl_id(std::string_view group) { return "nccl/" + std::string(group) + "/id"; }

// The GPU UUID of a member of an emulated-NCCL group (the test GPU module, gpu/emu): set by
// each member, read by the others while the group forms, to refuse two ranks on one GPU as
// NCCL does (gpu/emu/emu_nccl.cc).
inline std::string emu_gpu(std::string_view group, int rank) {
  return "emu/" + std::string(group) + "/gpu/" + std::to_string(rank);
}

}  // namespace partrain::rdzv_keys
