// What this version of partrain runs, decided once, before any worker starts: the agent
// (partraind, `partrain run --nproc`) calls it after validate_layout, and the worker calls it
// again as a guard. Each refusal is one line naming the combination and the fix (exit 2).
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
// on the host) is refused by the worker that loads it, the one check that needs the plugin's
// file (worker/transports.h check_plugin_memory). fp32 storage runs every other layout on GPU
// ranks, compositions included.
// A schedule that splits backward (ZB-H1) with recompute, MoE or tp is refused when the
// schedule is built (worker/pipeline_plan.h), the only check that needs the plugin.
#pragma once

#include "common/status.h"
#include "config/job_config.h"
#include "layout/layout.h"

namespace partrain::config {

Status check_supported(const JobConfig& job, const Layout& layout);

}  // namespace partrain::config
