// See plugin_file.h.
#include "plugin/plugin_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "partrain/abi.h"

namespace partrain::plugin {

namespace fs = std::filesystem;

const char* family_name(int family) {
  switch (family) {
    case PARTRAIN_FAMILY_DATA: return "data";
    case PARTRAIN_FAMILY_TENSOR: return "tensor";
    case PARTRAIN_FAMILY_PIPELINE: return "pipeline";
    case PARTRAIN_FAMILY_EXPERT: return "expert";
    case PARTRAIN_FAMILY_CONTEXT: return "context";
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

Status check_real_plugin_file(const std::string& path) {
  const fs::path link_dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  const fs::path dir = fs::canonical(link_dir, ec);
  if (ec) return Status::not_found(fmt::format("{}: refused: cannot resolve it ({})", link_dir.string(), ec.message()));
  const fs::path real = fs::canonical(path, ec);
  if (ec) return Status::not_found(fmt::format("{}: refused: cannot resolve it ({})", path, ec.message()));
  // real must be dir/<relative> with no ".." step: inside the plugin directory.
  const fs::path inside = real.lexically_relative(dir);
  if (inside.empty() || *inside.begin() == "..") {
    return Status::invalid(fmt::format("{}: refused: a link out of the plugin directory {} (to {}); copy the "
                                       "library itself into {}", path, dir.string(), real.string(), dir.string()));
  }
  PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(real.string(), false));
  for (fs::path folder = real.parent_path(); folder != dir && folder.has_relative_path(); folder = folder.parent_path()) {
    PARTRAIN_RETURN_IF_ERROR(check_owner_and_mode(folder.string(), true));
  }
  return check_owner_and_mode(dir.string(), true);
}

Status check_plugin_name_text(const std::string& name, const std::string& label) {
  const bool ok = !name.empty() && name.size() <= 255 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  });
  if (ok) return Status::ok();
  return Status::invalid(fmt::format(
      "{} name '{}': refused: a plugin is named by its file in the site config's plugin_dir, in letters, "
      "digits, '_', '.' and '-' only (no '/'); install it there and give its name, e.g. dp or zero2",
      label, name));
}

Result<std::string> plugin_file(const std::string& dir, const std::string& name,
                                const std::string& label) {
  PARTRAIN_RETURN_IF_ERROR(check_plugin_name_text(name, label));
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
