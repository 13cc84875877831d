// See install_dir.h.
#include "common/install_dir.h"

#include <string>
#include <system_error>

#ifndef PARTRAIN_INSTALL_BINDIR
#define PARTRAIN_INSTALL_BINDIR "bin"
#endif
#ifndef PARTRAIN_INSTALL_LIBEXECDIR
#define PARTRAIN_INSTALL_LIBEXECDIR "libexec"
#endif

namespace partrain {
namespace {

// `dir` less its trailing components equal to `suffix`'s, or empty when they differ.
std::filesystem::path strip_suffix(const std::filesystem::path& dir, const std::filesystem::path& suffix) {
  std::filesystem::path d = dir;
  std::filesystem::path s = suffix.lexically_normal();
  if (s.empty() || s.is_absolute()) return {};
  while (!s.empty() && s.has_filename()) {
    if (d.filename() != s.filename()) return {};
    d = d.parent_path();
    s = s.parent_path();
  }
  return d;
}

}  // namespace

std::filesystem::path install_prefix_of(const std::filesystem::path& program) {
  const std::filesystem::path dir = program.lexically_normal().parent_path();
  for (const std::filesystem::path& sub : {std::filesystem::path(PARTRAIN_INSTALL_LIBEXECDIR) / "partrain",
                                           std::filesystem::path(PARTRAIN_INSTALL_BINDIR)}) {
    if (std::filesystem::path prefix = strip_suffix(dir, sub); !prefix.empty()) return prefix;
  }
  return dir.parent_path();
}

std::filesystem::path install_prefix() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return install_prefix_of(ec ? std::filesystem::path("/proc/self/exe") : self);
}

std::filesystem::path installed_path(std::string_view relative) {
  return (install_prefix() / std::filesystem::path(relative)).lexically_normal();
}

}  // namespace partrain
