// See versioned_library.h.
#include "plugin/versioned_library.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <system_error>

#include <boost/dll/shared_library.hpp>
#include <fmt/format.h>

#include "plugin/elf_exports.h"
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
  PARTRAIN_RETURN_IF_ERROR(check_real_plugin_file(path));
  // Everything that can be decided from the file is decided before dlopen, which runs the
  // library's constructors: a refused plugin never runs any of its code.
  Result<std::map<std::string, ElfExport>> syms = read_elf_exports(path);
  if (!syms) return syms.status();
  auto symbol = [&](int v) { return abi.prefix + std::to_string(v); };
  auto table = [&](int v) -> const ElfExport* {
    auto it = syms->find(symbol(v));
    return it != syms->end() && it->second.object && it->second.size >= sizeof(uint32_t) ? &it->second : nullptr;
  };
  const std::string family = abi.label.empty() ? "" : abi.label + " ";
  int found = 0;
  for (int v = abi.newest; v >= abi.oldest && found == 0; --v) {
    if (table(v) != nullptr) found = v;
  }
  // An exported version this partrain does not load (older, or up to 64 newer).
  int other = 0;
  for (int v = 0; found == 0 && other == 0 && v <= abi.newest + 64; ++v) {
    if (v >= abi.oldest && v <= abi.newest) continue;
    if (syms->count(symbol(v))) other = v;
  }
  if (exports != nullptr) *exports = found != 0 || other != 0;
  if (found == 0 && other != 0) {
    return Status::invalid(fmt::format(
        "{}: refused: unsupported {}ABI version {} (exports {}); this partrain loads "
        "versions {} to {}; rebuild the plugin against this partrain's SDK headers",
        path, family, other, symbol(other), abi.oldest, abi.newest));
  }
  if (found == 0) {
    return Status::invalid(fmt::format("{}: refused: missing symbol {}; export it with {}", path,
                                       symbol(abi.newest), abi.macro));
  }
  // Every family's struct starts with its uint32_t abi_version; a table the file does not
  // initialise reads as version 0.
  auto check_said = [&](uint32_t said) -> Status {
    if (said == static_cast<uint32_t>(found)) return Status::ok();
    return Status::invalid(fmt::format(
        "{}: refused: unsupported {}ABI version {} (the {} struct says so); this "
        "partrain loads versions {} to {}; rebuild the plugin against this partrain's SDK "
        "headers", path, family, said, symbol(found), abi.oldest, abi.newest));
  };
  PARTRAIN_RETURN_IF_ERROR(check_said(table(found)->first_word.value_or(0)));

  VersionedTable out;
  out.lib = std::make_unique<Library>();
  boost::dll::shared_library& lib = out.lib->impl().lib;
  std::error_code ec;  // BOOST_DLL_USE_STD_FS: std::error_code
  lib.load(fs::path(path), boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec) {
    return Status::invalid(fmt::format("{}: refused: cannot load it as a shared library ({}); "
                                       "rebuild it as a MODULE library", path, ec.message()));
  }
  if (!lib.has(symbol(found))) {
    return Status::invalid(fmt::format("{}: refused: its file lists {} but the loader does not find it; rebuild "
                                       "it as a MODULE library", path, symbol(found)));
  }
  out.table = &lib.get<const char>(symbol(found));
  out.version = found;
  PARTRAIN_RETURN_IF_ERROR(check_said(*static_cast<const uint32_t*>(out.table)));
  return out;
}

}  // namespace partrain::plugin
