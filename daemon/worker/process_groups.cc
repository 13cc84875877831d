// See process_groups.h.
#include "worker/process_groups.h"

#include <algorithm>

#include <fmt/format.h>

#include "comm/rendezvous/keys.h"
#include "worker/transports.h"

namespace partrain::worker {

Result<ProcessGroups> ProcessGroups::create(const Layout& layout, int rank, comm::RendezvousClient& store,
                                            const GroupOptions& options) {
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
  // GPU ranks: each publishes its GPU's id, so every group sees which members share one.
  if (options.device == "cuda") {
    Result<GpuIds> ids = GpuIds::publish(store, options.prefix, rank, options.gloo.connect_timeout);
    if (!ids) return ids.status();
    out.gpu_ids_ = std::make_unique<GpuIds>(std::move(ids).value());
  }
  for (const AxisGroup& a : axes) {
    const std::vector<int> members = layout.group(a.axis, rank);
    if (!a.wanted || (members.size() < 2 && !a.single)) continue;
    const comm::GroupSpec spec{rdzv_keys::group(options.prefix, a.name, members.front()), members, rank};
    Result<GroupComms> g = make_group(spec, store, options.device, options.gloo, out.gpu_ids_.get());
    if (!g) return g.status();
    out.groups_.push_back({a.axis, std::move(g->comm), std::move(g->host)});
  }
  if (layout.pp() > 1) PARTRAIN_RETURN_IF_ERROR(out.add_pp_channels(layout, rank, store, options));
  return out;
}

// Every rank of the pp group walks the same list of channels and joins its own, so the
// meshes form in one order everywhere.
Status ProcessGroups::add_pp_channels(const Layout& layout, int rank, comm::RendezvousClient& store,
                                      const GroupOptions& o) {
  const std::vector<int> pp = layout.group(Axis::kPp, rank);
  const int P = static_cast<int>(pp.size());
  const int me = static_cast<int>(std::find(pp.begin(), pp.end(), rank) - pp.begin());
  struct Edge {
    PpStream stream;
    int from, to;
  };
  std::vector<Edge> edges;
  for (int r = 0; r + 1 < P; ++r) edges.push_back({PpStream::kActivation, r, r + 1});
  if (o.pp_chunks > 1) edges.push_back({PpStream::kActivation, P - 1, 0});  // chunk c's last stage to c + 1's first
  for (int r = 0; r + 1 < P; ++r) edges.push_back({PpStream::kGrad, r + 1, r});
  if (o.pp_chunks > 1) edges.push_back({PpStream::kGrad, 0, P - 1});
  for (const Edge& e : edges) {
    if (e.from != me && e.to != me) continue;
    const int a = pp[static_cast<size_t>(e.from)], b = pp[static_cast<size_t>(e.to)];
    const comm::GroupSpec spec{
        rdzv_keys::pp_channel(o.prefix, e.stream == PpStream::kActivation, a, b), {a, b}, rank};
    Result<GroupComms> g = make_group(spec, store, o.device, o.gloo, gpu_ids_.get(), /*with_host=*/false);
    if (!g) return g.status();
    channels_.push_back({e.stream, e.from, e.to, std::move(g->comm)});
  }
  return Status::ok();
}

const ProcessGroups::Group* ProcessGroups::find(Axis axis) const {
  for (const Group& g : groups_) {
    if (g.axis == axis) return &g;
  }
  return nullptr;
}

comm::Communicator* ProcessGroups::get(Axis axis) const {
  const Group* g = find(axis);
  return g != nullptr ? g->comm.get() : nullptr;
}

comm::Communicator* ProcessGroups::host(Axis axis) const {
  const Group* g = find(axis);
  if (g == nullptr) return nullptr;
  return g->host != nullptr ? g->host.get() : g->comm.get();
}

comm::Communicator* ProcessGroups::data_group() const {
  comm::Communicator* dp_cp = get(Axis::kDpCp);
  return dp_cp != nullptr ? dp_cp : get(Axis::kDp);
}

comm::Communicator* ProcessGroups::data_host() const {
  comm::Communicator* dp_cp = host(Axis::kDpCp);
  return dp_cp != nullptr ? dp_cp : host(Axis::kDp);
}

comm::Communicator* ProcessGroups::pp_channel(PpStream stream, int from, int to) const {
  for (const Channel& c : channels_) {
    if (c.stream == stream && c.from == from && c.to == to) return c.comm.get();
  }
  return nullptr;
}

std::vector<comm::Communicator*> ProcessGroups::all() const {
  std::vector<comm::Communicator*> out;
  for (const Group& g : groups_) out.push_back(g.comm.get());
  for (const Channel& c : channels_) out.push_back(c.comm.get());
  return out;
}

void ProcessGroups::abort_all(const std::string& why) {
  for (Group& g : groups_) {
    g.comm->abort(why);
    if (g.host) g.host->abort(why);
  }
  for (Channel& c : channels_) c.comm->abort(why);
}

}  // namespace partrain::worker
