// See process_groups.h.
#include "worker/process_groups.h"

#include <fmt/format.h>

#include "worker/device_comm.h"

namespace partrain::worker {

Result<ProcessGroups> ProcessGroups::create(const Layout& layout, int rank, const std::string& prefix,
                                            comm::RendezvousClient& store, const std::string& device,
                                            const comm::GlooOptions& gloo) {
  // The axes in the order every rank makes them; the name is the group's key stem.
  struct AxisGroup {
    Axis axis;
    const char* name;
    bool wanted;
    bool single = false;  // made even with one member
  };
  // ZeRO shards the experts over expert-dp with a data plugin instance of their own, which
  // needs its group even when it is this rank alone (dp x cp == ep).
  const bool zero_experts = layout.ep() > 1 && layout.spec().zero > 0;
  const bool cp = layout.cp() > 1;
  const AxisGroup axes[] = {
      {Axis::kTp, "tp", layout.tp() > 1},
      {Axis::kCp, "cp", cp},
      {Axis::kEp, "ep", layout.ep() > 1},
      {Axis::kExpertDp, "edp", layout.ep() > 1, zero_experts},  // the ranks holding the same experts
      {Axis::kDp, "dp", layout.dp() > 1 && !cp},
      {Axis::kDpCp, "dpcp", cp},  // cp: the gradient group, in dp's place
      {Axis::kPp, "pp", layout.pp() > 1},
  };
  ProcessGroups out;
  for (const AxisGroup& a : axes) {
    const std::vector<int> members = layout.group(a.axis, rank);
    if (!a.wanted || (members.size() < 2 && !a.single)) continue;
    const comm::GroupSpec spec{fmt::format("{}{}{}", prefix, a.name, members.front()), members, rank};
    Result<std::unique_ptr<comm::Communicator>> c =
        a.axis == Axis::kDp || a.axis == Axis::kDpCp ? make_group_communicator(spec, store, device, gloo)
                            : comm::create_gloo_communicator(spec, store, gloo);
    if (!c) return c.status();
    out.groups_.push_back({a.axis, std::move(c).value()});
  }
  return out;
}

comm::Communicator* ProcessGroups::get(Axis axis) const {
  for (const Group& g : groups_) {
    if (g.axis == axis) return g.comm.get();
  }
  return nullptr;
}

comm::Communicator* ProcessGroups::data_group() const {
  comm::Communicator* dp_cp = get(Axis::kDpCp);
  return dp_cp != nullptr ? dp_cp : get(Axis::kDp);
}

void ProcessGroups::abort_all(const std::string& why) {
  for (Group& g : groups_) g.comm->abort(why);
}

}  // namespace partrain::worker
