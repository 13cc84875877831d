// Crash points for the fault-matrix tests: PARTRAIN_FAULT=POINT:STEP[:RANK] makes the
// process that reaches POINT at step STEP (on rank RANK, any rank when left out) kill
// itself with SIGKILL there, the same death as kill -9 or the OOM killer, at an instant a
// test could not hit by timing. Unset (always, outside tests) it costs one getenv.
//
// With PARTRAIN_FAULT_ONCE=FILE only the first process that reaches the point dies (a
// restarted group runs past it).
//
// Points: after_step (a step finished and the asynchronous save in flight, if any, committed;
// before any save of this step: a kill between saves, after which the newest committed
// checkpoint is known whatever the machine's load), shard_write (half of the shard
// written under its temp name), before_commit (every shard durable, the WriteBatch not
// yet written), after_commit (written; the folder manifest, retention and the
// acknowledgement not yet done), after_manifest (the folder manifest written too).
// Two points fail instead of killing, as a disk answering EIO would: eio_shard (the rank's
// shard write returns EIO) and eio_commit (the store's commit returns EIO).
// One exits 0 instead, as a plugin calling exit(0) would: exit_zero (a step finished, before
// any save; the process ends with status 0 although its run did not reach the last step).
// One hangs instead, as a plugin stuck in its own code would: plugin_hang (the data plugin's
// grads_done is about to be called; one second later the process reports the phase "in the
// data plugin", then sleeps there for ever, running and in no wait, while its peers, silent
// longer, wait for it in the collectives).
// Two only delay: slow_snapshot (an asynchronous save's background copy of a CPU rank's
// state, made while the next step computes, starts 500 ms late: slower than that step's
// forward and backward, so its update must wait for the copy) and slow_write (an
// asynchronous save's shard write starts 1 s late, as on a busy shared file system: steps
// go on and the save commits after them).
// PARTRAIN_FAULT may name several points, comma-separated (e.g. slow_snapshot:4,after_step:6).
#pragma once

#include <cstdint>

namespace partrain::store {

// True when PARTRAIN_FAULT names this point, step and rank (the caller then dies its own
// way); crash_point() kills the process at once.
bool fault_armed(const char* point, int64_t step, int rank);
void crash_point(const char* point, int64_t step, int rank);
// Kills the process at once (SIGKILL), saying which point it was at: for a caller that
// checked fault_armed itself to reach the point's instant first.
[[noreturn]] void kill_at(const char* point, int64_t step, int rank);
// exit_zero at `step`: the process ends at once with status 0.
void exit_zero_point(int64_t step, int rank);
// plugin_hang at `step`: the calling thread never returns.
void hang_point(int64_t step, int rank);

}  // namespace partrain::store
