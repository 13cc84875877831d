// See schedule_loader.h. Kept apart from loader.cc (the data family's ABI moves there) so
// both can change independently; the permission checks are loader.cc's.
#include "plugin/schedule_loader.h"

#include <filesystem>
#include <system_error>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

namespace partrain::plugin {

namespace fs = std::filesystem;

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

std::string schedule_symbol(int version) { return fmt::format("partrain_schedule_v{}", version); }

// An exported partrain_schedule_vN this partrain does not load (older, or up to 64
// newer); 0 when there is none.
int unsupported_schedule_version(const boost::dll::shared_library& lib) {
  for (int v = 0; v <= kScheduleAbiVersion + 64; ++v) {
    if (v >= kOldestScheduleAbiVersion && v <= kScheduleAbiVersion) continue;
    if (lib.has(schedule_symbol(v))) return v;
  }
  return 0;
}

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
  if (exports_schedule != nullptr) *exports_schedule = false;
  const fs::path parent = fs::path(path).parent_path();
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(parent.empty() ? "." : parent.string(), true));
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(path, false));
  auto lib = std::make_unique<SchedulePlugin::Lib>();
  std::error_code ec;
  lib->lib.load(fs::path(path),
                boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec) {
    return Status::invalid(fmt::format("{}: refused: cannot load it as a shared library ({}); "
                                       "rebuild it as a MODULE library", path, ec.message()));
  }
  const partrain_schedule_v1_t* api = nullptr;
  int found = 0;
  for (int v = kScheduleAbiVersion; v >= kOldestScheduleAbiVersion && api == nullptr; --v) {
    if (!lib->lib.has(schedule_symbol(v))) continue;
    api = &lib->lib.get<const partrain_schedule_v1_t>(schedule_symbol(v));
    found = v;
  }
  const int other = api == nullptr ? unsupported_schedule_version(lib->lib) : 0;
  if (exports_schedule != nullptr) *exports_schedule = api != nullptr || other != 0;
  if (api == nullptr && other != 0) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported schedule ABI version {} (exports {}); this partrain loads "
        "versions {} to {}; rebuild the plugin against this partrain's SDK headers",
        path, other, schedule_symbol(other), kOldestScheduleAbiVersion, kScheduleAbiVersion));
  }
  if (api == nullptr) {
    return Status::invalid(fmt::format(
        "{}: refused: missing symbol {}; export it with PARTRAIN_SCHEDULE_PLUGIN from "
        "<partrain/schedule_sdk.h>", path, schedule_symbol(kScheduleAbiVersion)));
  }
  if (api->abi_version != static_cast<uint32_t>(found)) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported schedule ABI version {} (the {} struct says so); this "
        "partrain loads versions {} to {}; rebuild the plugin against this partrain's SDK "
        "headers", path, api->abi_version, schedule_symbol(found), kOldestScheduleAbiVersion,
        kScheduleAbiVersion));
  }
  if (api->name == nullptr || api->version == nullptr || api->build == nullptr) {
    return Status::invalid(
        fmt::format("{}: refused: {} lacks a name, version or build", path, schedule_symbol(found)));
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
  const std::string path = (fs::path(dir) / (name + ".so")).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return Status::not_found(fmt::format(
        "schedule '{}' is not installed: no {} (the site config's [paths] plugin_dir is {}; "
        "`partrain plugins` lists what is there)", name, path, dir));
  }
  Result<std::unique_ptr<SchedulePlugin>> p = load_schedule_plugin(path);
  if (!p) return p.status();
  if ((*p)->info().name != name) {
    return Status::invalid(fmt::format("{}: refused: the schedule calls itself '{}', not '{}'; "
                                       "rename the file to {}.so", path, (*p)->info().name, name,
                                       (*p)->info().name));
  }
  return p;
}

Result<std::vector<ListEntry>> list_all_plugins(const std::string& dir) {
  Result<std::vector<ListEntry>> list = list_plugins(dir);
  if (!list) return list;
  for (ListEntry& e : *list) {
    if (e.status) continue;
    bool exports = false;
    Result<std::unique_ptr<SchedulePlugin>> p = open_schedule_plugin(e.path, &exports);
    if (!exports) continue;  // not a schedule either: keep the data family's refusal
    if (p) {
      e.status = Status::ok();
      e.info = (*p)->info();
    } else {
      e.status = p.status();
    }
  }
  return list;
}

}  // namespace partrain::plugin
