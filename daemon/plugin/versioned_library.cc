// See versioned_library.h.
#include "plugin/versioned_library.h"

#include <cstdint>
#include <filesystem>
#include <system_error>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include "plugin/plugin_file.h"

namespace partrain::plugin {

namespace fs = std::filesystem;

struct Library::Impl {
  boost::dll::shared_library lib;
};

Library::Library() : impl_(std::make_unique<Impl>()) {}
Library::~Library() = default;

Result<VersionedTable> open_versioned(const std::string& path, const FamilyAbi& abi, bool* exports) {
  if (exports != nullptr) *exports = false;
  const fs::path parent = fs::path(path).parent_path();
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(parent.empty() ? "." : parent.string(), true));
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(path, false));
  VersionedTable found;
  found.lib = std::make_unique<Library>();
  boost::dll::shared_library& lib = found.lib->impl().lib;
  std::error_code ec;  // BOOST_DLL_USE_STD_FS: std::error_code
  lib.load(fs::path(path), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec) {
    return Status::invalid(fmt::format("{}: refused: cannot load it as a shared library ({}); "
                                       "rebuild it as a MODULE library", path, ec.message()));
  }
  auto symbol = [&](int v) { return abi.prefix + std::to_string(v); };
  const std::string family = abi.label.empty() ? "" : abi.label + " ";
  for (int v = abi.newest; v >= abi.oldest && found.table == nullptr; --v) {
    if (!lib.has(symbol(v))) continue;
    found.table = &lib.get<const char>(symbol(v));
    found.version = v;
  }
  // An exported version this partrain does not load (older, or up to 64 newer).
  int other = 0;
  for (int v = 0; found.table == nullptr && other == 0 && v <= abi.newest + 64; ++v) {
    if (v >= abi.oldest && v <= abi.newest) continue;
    if (lib.has(symbol(v))) other = v;
  }
  if (exports != nullptr) *exports = found.table != nullptr || other != 0;
  if (found.table == nullptr && other != 0) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported {}ABI version {} (exports {}); this partrain loads "
        "versions {} to {}; rebuild the plugin against this partrain's SDK headers",
        path, family, other, symbol(other), abi.oldest, abi.newest));
  }
  if (found.table == nullptr) {
    return Status::invalid(fmt::format("{}: refused: missing symbol {}; export it with {}", path,
                                       symbol(abi.newest), abi.macro));
  }
  // Every family's struct starts with its uint32_t abi_version.
  const uint32_t said = *static_cast<const uint32_t*>(found.table);
  if (said != static_cast<uint32_t>(found.version)) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported {}ABI version {} (the {} struct says so); this "
        "partrain loads versions {} to {}; rebuild the plugin against this partrain's SDK "
        "headers", path, family, said, symbol(found.version), abi.oldest, abi.newest));
  }
  return found;
}

}  // namespace partrain::plugin
