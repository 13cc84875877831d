// The host side of partrain_comm_v1_t and partrain_comm_v2_t (include/partrain/abi.h), of
// partrain_alltoall_v1_t (include/partrain/expert.h) and of partrain_p2p_v1_t
// (include/partrain/context.h): a layout group's
// Communicator offered to plugins through the C ABI. Work handles cross the boundary as
// opaque pointers; failures come back as PARTRAIN_EUNAVAIL plus the Status message.
#pragma once

#include "comm/communicator.h"
#include "partrain/abi.h"
#include "partrain/context.h"
#include "partrain/expert.h"

namespace partrain::worker {

// `comm` must outlive the returned struct's use; the struct holds no other state.
partrain_comm_v1_t make_plugin_comm(comm::Communicator* comm);
// The same with v2's reduce-scatter, all-gather and broadcast.
partrain_comm_v2_t make_plugin_comm_v2(comm::Communicator* comm);
// The all-to-all with per-rank counts of the expert family (include/partrain/expert.h).
partrain_alltoall_v1_t make_plugin_all_to_all(comm::Communicator* comm);
// The point-to-point exchanges of the context family (include/partrain/context.h).
partrain_p2p_v1_t make_plugin_p2p(comm::Communicator* comm);

}  // namespace partrain::worker
