// The Gloo backend of communicator.h: collectives over TCP for CPU ranks.
//
// Each communicator owns one Gloo TCP device and two Gloo contexts, both meshed through the
// rendezvous store under "gloo/<group name>/": one for everything, and one of its own for
// reduce-scatter (a probe found that sharing a context with Gloo's reduce-scatter slowed the
// all-reduces after it 10-30x). A worker thread runs the started operations in order; point
// to point operations are posted in that order and completed by the caller's wait().
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/rendezvous/client.h"

namespace partrain::comm {

struct GlooOptions {
  // Address Gloo binds to and advertises to its peers. Default: "" = this host's name,
  // which must resolve to an address the other nodes reach; "127.0.0.1" on one machine.
  std::string host;
  // Limit on one operation before it fails as unavailable. Default: 300 s.
  std::chrono::milliseconds timeout{300000};
  // Limit on building the mesh (all members must arrive). Default: 120 s.
  std::chrono::milliseconds connect_timeout{120000};
};

// Builds the group's mesh; blocks until every member has called it with the same spec.
// `store` is used only during the call. invalid for a bad spec, unavailable when members
// do not all arrive within connect_timeout.
Result<std::unique_ptr<Communicator>> create_gloo_communicator(const GroupSpec& spec, RendezvousClient& store,
                                                               const GlooOptions& options = {});

}  // namespace partrain::comm
