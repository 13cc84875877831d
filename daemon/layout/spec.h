// The `--partrain=SPEC` value: which parallelism a job uses. Comma-separated items:
//
//   tpN  ppN  dpN  epN  cpN   degrees (dp derived from the world size when absent)
//   zero0..zero3              ZeRO stage (0 = plain data parallel)
//   sp | nosp                 sequence parallel (default: sp when tp > 1)
//   sched=NAME[:V]            pipeline schedule: gpipe, 1f1b, interleaved:V, or a plugin's name
//   cpimpl=NAME               context-parallel plugin: ring (default), allgather, or a plugin's
//                             name
//   grad=NAME                 data plugin that averages the gradients instead of dp (zero0
//                             only): onebit, powersgd, or a plugin's name
//   mb=M                      micro-batches per step (overrides the derived grad_accum)
//
// e.g. "tp4,pp2", "tp2,pp2,dp2,zero1,sched=interleaved:2,mb=8", "ep4,zero2",
// "cp4,cpimpl=allgather", "dp4,grad=onebit".
// Part of the layout core: standard library only (the SPANK plugin links it).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace partrain {

struct ParallelSpec {
  int tp = 1;                   // tensor-parallel degree. Default: 1
  int pp = 1;                   // pipeline-parallel degree. Default: 1
  std::optional<int> dp;        // data-parallel degree. Default: world / (tp * pp * cp)
  int ep = 1;                   // expert-parallel degree (divides dp). Default: 1
  int cp = 1;                   // context-parallel degree. Default: 1
  int zero = 0;                 // ZeRO stage 0..3. Default: 0
  std::optional<bool> sp;       // sequence parallel. Default: tp > 1
  std::string sched = "1f1b";   // pipeline schedule name. Default: "1f1b"
  int virtual_stages = 1;       // V of sched=NAME:V. Default: 1
  std::string cp_impl = "ring"; // context-parallel plugin (cpimpl=NAME). Default: "ring"
  std::string grad;             // data plugin replacing dp (grad=NAME). Default: "" (dp, or zeroN)
  std::optional<int> mb;        // micro-batches per step. Default: derived from the job file

  bool sequence_parallel() const { return sp.value_or(tp > 1); }

  // Canonical text form, parseable back: "tp4,pp2,dp8,zero1,sp,sched=1f1b" (cpimpl=NAME
  // only when it is not the default ring, grad=NAME only when given).
  std::string to_string() const;
};

// Parses SPEC; on error the message names the offending item and the fix, e.g.
//   partrain: 'tpx' in --partrain: tp needs a positive whole number, e.g. tp4
Result<ParallelSpec> parse_spec(std::string_view text);

// Overlays the items explicitly present in `text` on `base` (precedence: the job file's
// [parallelism] < PARTRAIN_SPEC environment < command line).
Result<ParallelSpec> overlay_spec(const ParallelSpec& base, std::string_view text);

}  // namespace partrain
