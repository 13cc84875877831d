// See loader.h. The permission checks run before dlopen: a plugin nobody trusts never runs
// a constructor in partrain's address space.
#include "plugin/loader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

namespace partrain::plugin {

namespace fs = std::filesystem;

struct Plugin::Lib {
  boost::dll::shared_library lib;
};

Plugin::~Plugin() = default;

const char* family_name(int family) {
  switch (family) {
    case PARTRAIN_FAMILY_DATA: return "data";
    case PARTRAIN_FAMILY_TENSOR: return "tensor";
    case PARTRAIN_FAMILY_PIPELINE: return "pipeline";
    case PARTRAIN_FAMILY_EXPERT: return "expert";
    default: return "unknown";
  }
}

Status check_owner_and_mode(const std::string& path, bool is_dir) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::not_found(fmt::format("{}: refused: cannot stat it ({}); check the site "
                                         "config's [paths] plugin_dir", path, std::strerror(errno)));
  }
  const char* what = is_dir ? "plugin directory" : "plugin";
  if (is_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return Status::invalid(fmt::format("{}: refused: the {} is not a {}", path, what,
                                       is_dir ? "directory" : "regular file"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Status::invalid(fmt::format(
        "{}: refused: the {} is writable by group or others (mode {:04o}); run chmod go-w {}",
        path, what, st.st_mode & 07777, path));
  }
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me) {
    return Status::invalid(fmt::format(
        "{}: refused: the {} is owned by uid {}, neither root nor the current user (uid {}); "
        "run chown root {}", path, what, st.st_uid, me, path));
  }
  return Status::ok();
}

namespace {

std::string symbol_for(int version) { return fmt::format("partrain_strategy_v{}", version); }

// The version N of a partrain_strategy_vN the library exports that this partrain does not
// support (older ones, or up to 64 newer), for the message; 0 when there is none.
int unsupported_version(const boost::dll::shared_library& lib) {
  for (int v = 0; v <= kAbiVersion + 64; ++v) {
    if (v >= kOldestAbiVersion && v <= kAbiVersion) continue;
    if (lib.has(symbol_for(v))) return v;
  }
  return 0;
}

// The checks every version's table gets; fills *info from it.
template <typename Table>
Status check_table(const Table& api, const std::string& path, int found, PluginInfo* info) {
  if (api.abi_version != static_cast<uint32_t>(found)) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported ABI version {} (the {} struct says so); this partrain loads "
        "versions {} to {}; rebuild the plugin against this partrain's SDK headers",
        path, api.abi_version, symbol_for(found), kOldestAbiVersion, kAbiVersion));
  }
  if (api.name == nullptr || api.version == nullptr || api.init == nullptr ||
      api.finalize == nullptr) {
    return Status::invalid(fmt::format("{}: refused: {} lacks a name, version, init or finalize",
                                       path, symbol_for(found)));
  }
  *info = PluginInfo{path, api.name, family_name(api.family), api.version,
                     api.description != nullptr ? api.description : "", api.capabilities, found};
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Plugin>> load_plugin(const std::string& path) {
  const std::string dir = fs::path(path).parent_path().empty()
                              ? std::string(".")
                              : fs::path(path).parent_path().string();
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(dir, true));
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(path, false));

  auto lib = std::make_unique<Plugin::Lib>();
  std::error_code ec;  // BOOST_DLL_USE_STD_FS: std::error_code
  lib->lib.load(fs::path(path),
                boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec) {
    return Status::invalid(fmt::format("{}: refused: cannot load it as a shared library ({}); "
                                       "rebuild it as a MODULE library", path, ec.message()));
  }
  // Newest ABI first, then older ones this partrain still supports.
  std::unique_ptr<Plugin> p(new Plugin());
  int found = 0;
  for (int v = kAbiVersion; v >= kOldestAbiVersion && found == 0; --v) {
    if (!lib->lib.has(symbol_for(v))) continue;
    found = v;
    if (v == PARTRAIN_PLUGIN_ABI_V2) {
      p->api_v2_ = &lib->lib.get<const partrain_strategy_v2_t>(symbol_for(v));
    } else {
      p->api_v1_ = &lib->lib.get<const partrain_strategy_v1_t>(symbol_for(v));
    }
  }
  if (found == 0) {
    if (int other = unsupported_version(lib->lib); other != 0) {
      return Status::invalid(fmt::format(
          "{}: refused: unsupported ABI version {} (exports {}); this partrain loads versions "
          "{} to {}; rebuild the plugin against this partrain's SDK headers",
          path, other, symbol_for(other), kOldestAbiVersion, kAbiVersion));
    }
    return Status::invalid(fmt::format(
        "{}: refused: missing symbol {}; export it with PARTRAIN_STRATEGY_PLUGIN from "
        "<partrain/plugin_sdk.h>", path, symbol_for(kAbiVersion)));
  }
  // Both versions start with the same descriptive fields; check them the same way.
  PARTRAIN_RETURN_IF_ERROR(p->api_v2_ != nullptr ? check_table(*p->api_v2_, path, found, &p->info_)
                                                 : check_table(*p->api_v1_, path, found, &p->info_));
  p->lib_ = std::move(lib);
  return p;
}

Result<std::unique_ptr<Plugin>> find_plugin(const std::string& dir, const std::string& name) {
  const std::string path = (fs::path(dir) / (name + ".so")).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return Status::not_found(fmt::format(
        "plugin '{}' is not installed: no {} (the site config's [paths] plugin_dir is {}; "
        "`partrain plugins` lists what is there)", name, path, dir));
  }
  Result<std::unique_ptr<Plugin>> p = load_plugin(path);
  if (!p) return p.status();
  if ((*p)->info().name != name) {
    return Status::invalid(fmt::format("{}: refused: the plugin calls itself '{}', not '{}'; "
                                       "rename the file to {}.so", path, (*p)->info().name, name,
                                       (*p)->info().name));
  }
  return p;
}

Result<std::vector<ListEntry>> list_plugins(const std::string& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    return Status::not_found(fmt::format("{}: cannot list the plugin directory ({}); check the "
                                         "site config's [paths] plugin_dir", dir, ec.message()));
  }
  std::vector<ListEntry> out;
  for (const fs::directory_entry& e : it) {
    if (e.path().extension() != ".so") continue;
    ListEntry entry;
    entry.path = e.path().string();
    Result<std::unique_ptr<Plugin>> p = load_plugin(entry.path);
    if (p) {
      entry.info = (*p)->info();
    } else {
      entry.status = p.status();
    }
    out.push_back(std::move(entry));
  }
  std::sort(out.begin(), out.end(),
            [](const ListEntry& a, const ListEntry& b) { return a.path < b.path; });
  return out;
}

}  // namespace partrain::plugin
