// One opened plugin of a family with a single versioned table (tensor, expert, schedule),
// written once: FamilyPlugin<Family> opens `path` through open_versioned (permission checks
// before dlopen, newest supported `<prefix><N>` first), checks that the table names every
// function the family needs, and keeps the library loaded while the table is in use.
//
// A Family is a small struct (see tensor_loader.h):
//   using Table = partrain_tensor_v1_t;         the struct the plugin exports
//   static constexpr int kFamily;               PARTRAIN_FAMILY_*
//   static FamilyAbi abi();                     symbol prefix, versions, SDK macro
//   static const char* kLabel;                  "tensor plugin": in messages
//   static const char* missing(const Table&);   what it lacks ("name, version, init ..."), or null
//   static uint64_t capabilities(const Table&);
#pragma once

#include <memory>
#include <string>

#include <fmt/format.h>

#include "common/status.h"
#include "plugin/plugin_file.h"
#include "plugin/versioned_library.h"

namespace partrain::plugin {

template <typename Family>
class FamilyPlugin {
 public:
  using Table = typename Family::Table;
  virtual ~FamilyPlugin() = default;
  FamilyPlugin(const FamilyPlugin&) = delete;
  FamilyPlugin& operator=(const FamilyPlugin&) = delete;

  const PluginInfo& info() const { return info_; }
  const Table* api() const { return api_; }

  // Opens `path` as a plugin of this family. *exports (when not null) says whether the
  // library exports any version of the family's symbol (so a lister can tell families apart).
  static Result<std::unique_ptr<FamilyPlugin>> open(const std::string& path, bool* exports) {
    std::unique_ptr<FamilyPlugin> p(new FamilyPlugin());
    PARTRAIN_RETURN_IF_ERROR(p->open_into(path, exports));
    return p;
  }
  // Opens <dir>/<name>.so and checks that the plugin calls itself `name`.
  static Result<std::unique_ptr<FamilyPlugin>> find(const std::string& dir, const std::string& name) {
    Result<std::string> path = plugin_file(dir, name, Family::kLabel);
    if (!path) return path.status();
    Result<std::unique_ptr<FamilyPlugin>> p = open(*path, nullptr);
    if (!p) return p.status();
    PARTRAIN_RETURN_IF_ERROR(check_plugin_name(*path, Family::kLabel, (*p)->info().name, name));
    return p;
  }

 protected:
  FamilyPlugin() = default;
  Status open_into(const std::string& path, bool* exports) {
    const FamilyAbi abi = Family::abi();
    Result<VersionedTable> t = open_versioned(path, abi, exports);
    if (!t) return t.status();
    const auto* api = static_cast<const Table*>(t->table);
    if (const char* missing = Family::missing(*api); missing != nullptr) {
      return Status::invalid(fmt::format("{}: refused: {}{} lacks a {}", path, abi.prefix, t->version, missing));
    }
    lib_ = std::move(t->lib);
    api_ = api;
    info_ = PluginInfo{path, api->name, family_name(Family::kFamily), api->version,
                       api->description != nullptr ? api->description : "", Family::capabilities(*api),
                       t->version};
    return Status::ok();
  }

 private:
  std::unique_ptr<Library> lib_;
  const Table* api_ = nullptr;
  PluginInfo info_;
};

}  // namespace partrain::plugin
