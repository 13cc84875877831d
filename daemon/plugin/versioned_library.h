// Opening a plugin the way every family does: check the file and its directory
// (plugin_file.h), read its exports from the file (elf_exports.h), probe the family's
// versioned symbol `<prefix><N>` newest first (as NCCL probes its plugins), and refuse an
// exported version this partrain does not load or a struct whose leading abi_version
// disagrees with its symbol -- all before dlopen, which runs the library's constructors.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace partrain::plugin {

struct FamilyAbi {
  std::string label;   // in messages: "schedule", "tensor"; "" for the data family
  std::string prefix;  // symbol prefix: "partrain_schedule_v"
  int oldest = 1, newest = 1;
  std::string macro;   // the SDK macro that exports it: "PARTRAIN_SCHEDULE_PLUGIN from <...>"
};

// An opened shared object (Boost.DLL's shared_library behind it); tables found in it stay
// valid while it lives.
class Library {
 public:
  Library();
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// The table found: its address inside `lib` and its version.
struct VersionedTable {
  std::unique_ptr<Library> lib;
  const void* table = nullptr;
  int version = 0;
};

// Opens `path` and finds the newest supported table of `abi`. *exports (when not null) says
// whether the library exports any `<prefix><N>` at all, supported or not.
Result<VersionedTable> open_versioned(const std::string& path, const FamilyAbi& abi, bool* exports);

}  // namespace partrain::plugin
