// See versioned_library.h.
#include "plugin/versioned_library.h"

#include <cstdint>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "plugin/loader.h"

namespace partrain::plugin {

namespace fs = std::filesystem;

Result<VersionedTable> open_versioned(const std::string& path, const FamilyAbi& abi,
                                      boost::dll::shared_library* lib, bool* exports) {
  if (exports != nullptr) *exports = false;
  const fs::path parent = fs::path(path).parent_path();
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(parent.empty() ? "." : parent.string(), true));
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(path, false));
  std::error_code ec;
  lib->load(fs::path(path), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec) {
    return Status::invalid(fmt::format("{}: refused: cannot load it as a shared library ({}); "
                                       "rebuild it as a MODULE library", path, ec.message()));
  }
  auto symbol = [&](int v) { return abi.prefix + std::to_string(v); };
  VersionedTable found;
  for (int v = abi.newest; v >= abi.oldest && found.table == nullptr; --v) {
    if (!lib->has(symbol(v))) continue;
    found.table = &lib->get<const char>(symbol(v));
    found.version = v;
  }
  // An exported version this partrain does not load (older, or up to 64 newer).
  int other = 0;
  for (int v = 0; found.table == nullptr && other == 0 && v <= abi.newest + 64; ++v) {
    if (v >= abi.oldest && v <= abi.newest) continue;
    if (lib->has(symbol(v))) other = v;
  }
  if (exports != nullptr) *exports = found.table != nullptr || other != 0;
  if (found.table == nullptr && other != 0) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported {} ABI version {} (exports {}); this partrain loads "
        "versions {} to {}; rebuild the plugin against this partrain's SDK headers",
        path, abi.label, other, symbol(other), abi.oldest, abi.newest));
  }
  if (found.table == nullptr) {
    return Status::invalid(fmt::format("{}: refused: missing symbol {}; export it with {}", path,
                                       symbol(abi.newest), abi.macro));
  }
  // Every family's struct starts with its uint32_t abi_version.
  const uint32_t said = *static_cast<const uint32_t*>(found.table);
  if (said != static_cast<uint32_t>(found.version)) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported {} ABI version {} (the {} struct says so); this "
        "partrain loads versions {} to {}; rebuild the plugin against this partrain's SDK "
        "headers", path, abi.label, said, symbol(found.version), abi.oldest, abi.newest));
  }
  return found;
}

Result<std::string> plugin_file(const std::string& dir, const std::string& name,
                                const std::string& label) {
  const std::string path = (fs::path(dir) / (name + ".so")).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return Status::not_found(fmt::format(
        "{} '{}' is not installed: no {} (the site config's [paths] plugin_dir is {}; "
        "`partrain plugins` lists what is there)", label, name, path, dir));
  }
  return path;
}

Status check_plugin_name(const std::string& path, const std::string& label,
                         const std::string& actual, const std::string& wanted) {
  if (actual == wanted) return Status::ok();
  return Status::invalid(fmt::format("{}: refused: the {} calls itself '{}', not '{}'; rename the "
                                     "file to {}.so", path, label, actual, wanted, actual));
}

}  // namespace partrain::plugin
