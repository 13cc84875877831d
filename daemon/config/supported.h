// What this version of partrain runs, decided once, before any worker starts, as part of
// check_job (below). Each refusal is one line naming the combination and the fix (exit 2).
//
// The table, as of this version (GPU ranks: also the emulated GPU, daemon/gpu/emu, which
// proves in CI what runs there: tests/runtime/emu_layout_test.cc):
//   cp x tp with sp                each cp rank's seq_len / cp rows must split over tp
//   tp on a MoE model, (seq_len / cp) % tp != 0
//                                  refused: each tp rank routes its own 1/tp of its cp rank's
//                                  tokens (cp x tp x MoE runs: the router gathers the logits
//                                  over tp, then cp, and routes the micro-batch in order)
//   [job] precision = "bf16" (the GPU default; a test mode on CPU ranks) with tp, ep, pp,
//   cp or zeroN                    not run yet: plugin ABI v2 moves fp32 buffers, typed
//                                  buffers come with ABI v3 (set precision = "fp32")
// On GPU ranks, a data, tensor or expert plugin without PARTRAIN_CAP_CUDA (it reads buffers
// on the host) is refused by the checks that need the plugin's file (worker/transports.h
// check_plugin_memory), which the agent makes next, also before any worker starts
// (worker/strategies.h check_strategies, with the pipeline schedule's own check). fp32
// storage runs every other layout on GPU ranks, compositions included.
// A schedule that splits backward (ZB-H1) runs with recompute, MoE and tp; with zero2 or zero3
// it is refused when the model is built (engine/model/weight_grads.cc): use zero1.
#pragma once

#include "common/status.h"
#include "config/job_config.h"
#include "layout/layout.h"

namespace partrain::config {

Status check_supported(const JobConfig& job, const Layout& layout);

// The one check of a job on `world` ranks that every entry point makes before any rank
// starts (partraind's agent on every node, `partrain run` on one rank and with --nproc) and
// each worker repeats as a cheap guard, so a job is refused in the same words whoever starts
// it: the layout on the world (Layout::create), the global batch's split over its dp, the
// layout against the model (validate_layout), what this version runs (check_supported) and
// the run's folders (check_paths). The first refusal, one line naming the fix (invalid).
Status check_job(const JobConfig& job, int world);

// The files partrain names under the run folder and the checkpoint folder (a rank's shard
// "step-000000000012/rank-00003.bin.tmp.PID", RocksDB's files in state.db/, TensorBoard's
// events.out.tfevents.TIME.HOST.PID, ...) take up to kDerivedPathReserve bytes more than
// the folder's absolute path: a folder whose path leaves less than that below PATH_MAX, or
// with a component longer than NAME_MAX, is refused here, before step 1, naming the folder
// and the limit (it used to train until the first save failed).
inline constexpr size_t kDerivedPathReserve = 160;
Status check_paths(const JobConfig& job);

}  // namespace partrain::config
