// A rank's communicators: one per layout group it belongs to that has more than one
// member (tp, cp, ep and expert_dp when ep > 1, dp, pp; expert_dp also with one member under
// ZeRO, where it carries the experts' shards), made in one loop over the axes, in the same
// order on every rank, through the job's rendezvous store. Under context parallelism the
// gradient group is dp x cp (cp ranks hold the same weights): it takes the dp group's place
// (data_group()). Each group's name carries this attempt's key prefix and the
// group's first member, so a restarted worker group starts clean.
//
// Transport: the dp (or dp x cp) group uses NCCL on GPU ranks (device_comm.h), Gloo over TCP
// otherwise; the other groups are Gloo (tp, cp, ep and pp run on CPU ranks in this version).
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

namespace partrain::worker {

class ProcessGroups {
 public:
  // `prefix` is the attempt's key prefix ("a0.0/"), `device` the job's ("cpu", "cuda").
  static Result<ProcessGroups> create(const Layout& layout, int rank, const std::string& prefix,
                                      comm::RendezvousClient& store, const std::string& device,
                                      const comm::GlooOptions& gloo);
  // The group of `axis` this rank is in; null when it has one member (but expert_dp under
  // ZeRO) or the axis has no communicator in this version.
  comm::Communicator* get(Axis axis) const;
  // The group whose gradients the data plugin reduces: dp, or dp x cp under cp; null when
  // it has one member.
  comm::Communicator* data_group() const;
  // Fails every operation in flight on every group, saying `why`.
  void abort_all(const std::string& why);

 private:
  struct Group {
    Axis axis;
    std::unique_ptr<comm::Communicator> comm;
  };
  std::vector<Group> groups_;
};

}  // namespace partrain::worker
