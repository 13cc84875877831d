// A rank's communicators: one per layout group it belongs to that has more than one
// member (tp, cp, ep and expert_dp when ep > 1, dp, pp; expert_dp also with one member under
// ZeRO, where it carries the experts' shards), made in one loop over the axes, in the same
// order on every rank, through the job's rendezvous store. Under context parallelism the
// gradient group is dp x cp (cp ranks hold the same weights): it takes the dp group's place
// (data_group()). Each group's name carries this attempt's key prefix and the
// group's first member, so a restarted worker group starts clean.
//
// Two faces per group:
//   get(axis)   moves tensors: the group's transport (transports.h: Gloo on CPU ranks; on
//               GPU ranks NCCL, or the host-staged transport where members share a GPU);
//   host(axis)  the group's host control channel: Gloo over host memory, for the scalars the
//               host itself needs (loss, norms, token counts, stop flags, timings). On CPU
//               ranks it is the same communicator as get(axis).
//
// Pipeline transfers (pp > 1) travel on channels of their own, one two-rank communicator per
// stream and direction: activations from pp rank a to a + 1, gradients from a + 1 to a (and,
// with virtual stages, from the last rank to the first and back). On each channel one rank
// only sends and the other only receives, so messages match in issue order (NCCL's rule, no
// tags) and a send waiting for its receiver never holds up a receive of the same rank.
// Example, pp2 without virtual stages: act 0->1 and grad 1->0; with v = 2 also act 1->0 and
// grad 0->1.
//
// Teardown has one owner: abort_all() fails every operation in flight on every group at
// once (peers blocked on this rank fail too, instead of waiting for a timeout). The training
// code calls it on an error while the buffers those operations use are still alive.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/rendezvous/client.h"
#include "common/status.h"
#include "layout/layout.h"
#include "worker/transports.h"

namespace partrain::worker {

// The two streams of pipeline transfers.
enum class PpStream { kActivation, kGrad };

// How a worker makes its groups (transports.h chooses a transport per group from these).
struct GroupOptions {
  std::string prefix;   // the attempt's key prefix ("a0.0/")
  std::string device;   // the job's ("cpu", "cuda")
  comm::GlooOptions gloo;
  int pp_chunks = 1;    // virtual stages per pp rank (the schedule's v)
};

class ProcessGroups {
 public:
  static Result<ProcessGroups> create(const Layout& layout, int rank, comm::RendezvousClient& store,
                                      const GroupOptions& options);
  // The group of `axis` this rank is in; null when it has one member (but expert_dp under
  // ZeRO) or the axis has no communicator.
  comm::Communicator* get(Axis axis) const;
  // Its host control channel (null exactly when get(axis) is).
  comm::Communicator* host(Axis axis) const;
  // The group whose gradients the data plugin reduces: dp, or dp x cp under cp; null when
  // it has one member. data_host() is its host channel.
  comm::Communicator* data_group() const;
  comm::Communicator* data_host() const;
  // pp > 1: the channel of `stream` from pp rank `from` to pp rank `to` (this rank is one
  // of them; group rank 0 sends, 1 receives); null where the layout has none.
  comm::Communicator* pp_channel(PpStream stream, int from, int to) const;
  // Every communicator that moves tensors (the groups' and the pp channels), to bind them to
  // the backend (transports.h bind_to_backend).
  std::vector<comm::Communicator*> all() const;
  // Fails every operation in flight on every group, saying `why`.
  void abort_all(const std::string& why);

 private:
  struct Group {
    Axis axis;
    std::unique_ptr<comm::Communicator> comm;
    std::unique_ptr<comm::Communicator> host;  // null: comm is its own host channel
  };
  struct Channel {
    PpStream stream;
    int from, to;
    std::unique_ptr<comm::Communicator> comm;
  };
  Status add_pp_channels(const Layout& layout, int rank, comm::RendezvousClient& store, const GroupOptions& o);
  const Group* find(Axis axis) const;

  std::unique_ptr<GpuIds> gpu_ids_;  // GPU ranks
  std::vector<Group> groups_;
  std::vector<Channel> channels_;
};

}  // namespace partrain::worker
