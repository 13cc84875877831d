// The schedule checker: what the runtime and `partrain schedule` run before using a
// schedule. A bad one is refused with its first violation, as
//   schedule NAME (pp=P, m=M, v=V): rank R, action I (KIND mbB chunkC ...): what is wrong
// Ranks are checked in order, each action in order, then what a rank never did; then
// that the transfers pair up (streams.h); then, by simulation, that no deadlock exists.
//
// The rules, for every rank r and every chunk c (stage s = c*pp + r) and micro-batch i:
//  - exactly one forward; exactly one backward, or one backward-input followed later by
//    one backward-weight;
//  - the forward after the activations arrived: a recv-activation from the rank of stage
//    s-1 earlier on this rank (when s-1 is on this same rank, its forward earlier);
//  - the backward after the forward, and after the output gradient arrived: a recv-grad
//    from the rank of stage s+1 earlier (on this rank: stage s+1's backward earlier);
//  - a send-activation to the rank of s+1 after the forward, a send-grad to the rank of
//    s-1 after the backward, each exactly once, and no transfer the placement does not need;
//  - every transfer matched, in order, by the peer (streams.h), and no deadlock.
#pragma once

#include "common/status.h"
#include "pipeline/schedule.h"

namespace partrain::pipeline {

Status check(const Schedule& s);

}  // namespace partrain::pipeline
