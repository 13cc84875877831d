// See schedule_loader.h. Kept apart from loader.cc (the data family's ABI moves there) so
// both can change independently; the permission checks are loader.cc's.
#include "plugin/schedule_loader.h"

#include "plugin/expert_loader.h"
#include "plugin/tensor_loader.h"
#include "plugin/versioned_library.h"

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

namespace partrain::plugin {

// The checker and the runtime read plugin actions as pipeline::Action.
static_assert(static_cast<int>(pipeline::Kind::kForward) == PARTRAIN_ACTION_FORWARD);
static_assert(static_cast<int>(pipeline::Kind::kBackwardInput) == PARTRAIN_ACTION_BACKWARD_INPUT);
static_assert(static_cast<int>(pipeline::Kind::kBackwardWeight) == PARTRAIN_ACTION_BACKWARD_WEIGHT);
static_assert(static_cast<int>(pipeline::Kind::kRecvGrad) == PARTRAIN_ACTION_RECV_GRAD);

struct SchedulePlugin::Lib {
  boost::dll::shared_library lib;
};

SchedulePlugin::~SchedulePlugin() = default;

namespace {

// Actions one rank may list: far above any real schedule, low enough to allocate.
constexpr size_t kMaxActions = size_t{1} << 24;

}  // namespace

Result<pipeline::Schedule> SchedulePlugin::build(int pp, int m, int v) const {
  pipeline::Schedule s;
  s.name = info_.name;
  s.shape = pipeline::Shape{pp, m, v};
  s.ranks.resize(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    char err[512] = {0};
    size_t count = 0;
    int rc = api_->build(pp, m, v, r, nullptr, 0, &count, err, sizeof err);
    std::vector<partrain_action_v1_t> raw;
    if (rc == PARTRAIN_OK) {
      if (count > kMaxActions) {
        return Status::invalid(fmt::format("partrain: schedule {} lists {} actions for rank {}, "
                                           "more than the {} partrain accepts",
                                           info_.name, count, r, kMaxActions));
      }
      raw.resize(count);
      size_t written = 0;
      rc = api_->build(pp, m, v, r, raw.data(), raw.size(), &written, err, sizeof err);
      if (rc == PARTRAIN_OK && written > raw.size()) {
        return Status::internal(fmt::format("partrain: schedule {} wrote {} actions into room "
                                            "for {}", info_.name, written, raw.size()));
      }
      raw.resize(written);
    }
    if (rc != PARTRAIN_OK) {
      err[sizeof err - 1] = '\0';
      const std::string msg = fmt::format("partrain: schedule {} (pp={}, m={}, v={}): {}",
                                          info_.name, pp, m, v, err);
      return rc == PARTRAIN_EINVAL ? Status::invalid(msg) : Status::internal(msg);
    }
    for (const partrain_action_v1_t& a : raw) {
      s.ranks[r].push_back(
          pipeline::Action{static_cast<pipeline::Kind>(a.kind), a.microbatch, a.chunk, a.peer});
    }
  }
  return s;
}

Result<std::unique_ptr<SchedulePlugin>> open_schedule_plugin(const std::string& path,
                                                             bool* exports_schedule) {
  const FamilyAbi abi{"schedule", "partrain_schedule_v", kOldestScheduleAbiVersion,
                      kScheduleAbiVersion,
                      "PARTRAIN_SCHEDULE_PLUGIN from <partrain/schedule_sdk.h>"};
  auto lib = std::make_unique<SchedulePlugin::Lib>();
  Result<VersionedTable> t = open_versioned(path, abi, &lib->lib, exports_schedule);
  if (!t) return t.status();
  const int found = t->version;
  const auto* api = static_cast<const partrain_schedule_v1_t*>(t->table);
  if (api->name == nullptr || api->version == nullptr || api->build == nullptr) {
    return Status::invalid(
        fmt::format("{}: refused: partrain_schedule_v{} lacks a name, version or build", path, found));
  }
  std::unique_ptr<SchedulePlugin> p(new SchedulePlugin());
  p->lib_ = std::move(lib);
  p->api_ = api;
  p->info_ = PluginInfo{path, api->name, family_name(PARTRAIN_FAMILY_PIPELINE), api->version,
                        api->description != nullptr ? api->description : "", 0, found};
  return p;
}

Result<std::unique_ptr<SchedulePlugin>> load_schedule_plugin(const std::string& path) {
  return open_schedule_plugin(path, nullptr);
}

Result<std::unique_ptr<SchedulePlugin>> find_schedule_plugin(const std::string& dir,
                                                             const std::string& name) {
  Result<std::string> path = plugin_file(dir, name, "schedule");
  if (!path) return path.status();
  Result<std::unique_ptr<SchedulePlugin>> p = load_schedule_plugin(*path);
  if (!p) return p.status();
  PARTRAIN_RETURN_IF_ERROR(check_plugin_name(*path, "schedule", (*p)->info().name, name));
  return p;
}

Result<std::vector<ListEntry>> list_all_plugins(const std::string& dir) {
  Result<std::vector<ListEntry>> list = list_plugins(dir);
  if (!list) return list;
  for (ListEntry& e : *list) {
    if (e.status) continue;
    bool exports = false;
    Result<std::unique_ptr<SchedulePlugin>> p = open_schedule_plugin(e.path, &exports);
    if (exports) {
      e.status = p ? Status::ok() : p.status();
      if (p) e.info = (*p)->info();
      continue;
    }
    Result<std::unique_ptr<TensorPlugin>> t = open_tensor_plugin(e.path, &exports);
    if (exports) {
      e.status = t ? Status::ok() : t.status();
      if (t) e.info = (*t)->info();
      continue;
    }
    Result<std::unique_ptr<ExpertPlugin>> x = open_expert_plugin(e.path, &exports);
    if (!exports) continue;  // no other family either: keep the data family's refusal
    e.status = x ? Status::ok() : x.status();
    if (x) e.info = (*x)->info();
  }
  return list;
}

}  // namespace partrain::plugin
