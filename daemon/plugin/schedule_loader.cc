// See schedule_loader.h.
#include "plugin/schedule_loader.h"

#include <fmt/format.h>

namespace partrain::plugin {

// The checker and the runtime read plugin actions as pipeline::Action.
static_assert(static_cast<int>(pipeline::Kind::kForward) == PARTRAIN_ACTION_FORWARD);
static_assert(static_cast<int>(pipeline::Kind::kBackwardInput) == PARTRAIN_ACTION_BACKWARD_INPUT);
static_assert(static_cast<int>(pipeline::Kind::kBackwardWeight) == PARTRAIN_ACTION_BACKWARD_WEIGHT);
static_assert(static_cast<int>(pipeline::Kind::kRecvGrad) == PARTRAIN_ACTION_RECV_GRAD);

namespace {

// Actions one rank may list: far above any real schedule, low enough to allocate.
constexpr size_t kMaxActions = size_t{1} << 24;

}  // namespace

Result<pipeline::Schedule> build_schedule(const SchedulePlugin& plugin, int pp, int m, int v) {
  const PluginInfo& info = plugin.info();
  const partrain_schedule_v1_t* api = plugin.api();
  pipeline::Schedule s;
  s.name = info.name;
  s.shape = pipeline::Shape{pp, m, v};
  s.ranks.resize(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    char err[512] = {0};
    size_t count = 0;
    int rc = api->build(pp, m, v, r, nullptr, 0, &count, err, sizeof err);
    std::vector<partrain_action_v1_t> raw;
    if (rc == PARTRAIN_OK) {
      if (count > kMaxActions) {
        return Status::invalid(fmt::format("partrain: schedule {} lists {} actions for rank {}, "
                                           "more than the {} partrain accepts",
                                           info.name, count, r, kMaxActions));
      }
      raw.resize(count);
      size_t written = 0;
      rc = api->build(pp, m, v, r, raw.data(), raw.size(), &written, err, sizeof err);
      if (rc == PARTRAIN_OK && written > raw.size()) {
        return Status::internal(fmt::format("partrain: schedule {} wrote {} actions into room "
                                            "for {}", info.name, written, raw.size()));
      }
      raw.resize(written);
    }
    if (rc != PARTRAIN_OK) {
      err[sizeof err - 1] = '\0';
      const std::string msg = fmt::format("partrain: schedule {} (pp={}, m={}, v={}): {}",
                                          info.name, pp, m, v, err);
      return rc == PARTRAIN_EINVAL ? Status::invalid(msg) : Status::internal(msg);
    }
    for (const partrain_action_v1_t& a : raw) {
      s.ranks[static_cast<size_t>(r)].push_back(
          pipeline::Action{static_cast<pipeline::Kind>(a.kind), a.microbatch, a.chunk, a.peer});
    }
  }
  return s;
}

}  // namespace partrain::plugin
