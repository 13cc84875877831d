// spank_partrain.so: the SPANK callbacks, dispatched to one file per Slurm context
// (allocator.cc for sbatch/salloc/srun, remote.cc for slurmstepd). Every callback catches
// everything: no exception may unwind into Slurm's C code.
//
// The linker version script (spank_partrain.map) exports only the symbols below.
#include <exception>
#include <string_view>
#include <vector>

#include "context.h"
#include "site_settings.h"
#include "spank_api.h"

// The build hides every symbol by default; these are the plugin's interface.
#define PARTRAIN_SPANK_EXPORT __attribute__((visibility("default")))

// In C++ a namespace-scope const has internal linkage; declared extern "C" first, the
// definitions SPANK_PLUGIN makes are exported under the names Slurm's loader looks up.
extern "C" {
PARTRAIN_SPANK_EXPORT extern const char plugin_name[];
PARTRAIN_SPANK_EXPORT extern const char plugin_type[];
PARTRAIN_SPANK_EXPORT extern const unsigned int plugin_version;
PARTRAIN_SPANK_EXPORT extern const unsigned int spank_plugin_version;
SPANK_PLUGIN(partrain, 1)
}

namespace partrain::spank {
namespace {

template <typename F>
int guarded(const char* callback, int on_exception, F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      report(std::string("internal error in ") + callback + ": " + e.what() +
             "; please report it");
    } catch (...) {
    }
  } catch (...) {
    slurm_error("partrain: internal error in %s; please report it", callback);
  }
  return on_exception;
}

}  // namespace

PluginState& state() {
  static PluginState s;
  return s;
}

std::string unprefixed(const std::string& message) {
  constexpr std::string_view kPrefix = "partrain: ";
  std::string_view text = message;
  if (text.substr(0, kPrefix.size()) == kPrefix) text.remove_prefix(kPrefix.size());
  return std::string(text);
}

void report(const std::string& message) {
  const std::string text = unprefixed(message);
  slurm_error("partrain: %s", text.c_str());
}

void tell(const std::string& message) {
  const std::string text = unprefixed(message);
  slurm_spank_log("partrain: %s", text.c_str());
}

}  // namespace partrain::spank

using partrain::spank::guarded;

namespace {

// The plugstack.conf arguments, completed from partrain.toml (the file partrain reads too,
// site_settings.h), into state().args. False after reporting a problem.
bool load_args(int ac, char** av) {
  std::vector<std::string_view> words(av, av + ac);
  auto args = partrain::spank::parse_plugin_args(words);
  if (!args.is_ok()) {
    partrain::spank::report(args.status().message());
    return false;
  }
  if (partrain::Status s = partrain::spank::apply_site_config(&*args); !s.is_ok()) {
    partrain::spank::report(s.message());
    return false;
  }
  partrain::spank::state().args = *args;
  return true;
}

}  // namespace

extern "C" PARTRAIN_SPANK_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  return guarded("slurm_spank_init", -1, [&] {
    if (!load_args(ac, av)) return -1;
    switch (spank_context()) {
      case S_CTX_LOCAL:
      case S_CTX_ALLOCATOR:
      case S_CTX_REMOTE: return partrain::spank::register_options(sp);
      default: return 0;
    }
  });
}

extern "C" PARTRAIN_SPANK_EXPORT int slurm_spank_init_post_opt(spank_t sp, int, char**) {
  return guarded("slurm_spank_init_post_opt", -1, [&] {
    const spank_context_t ctx = spank_context();
    return ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL ? partrain::spank::check_at_submit(sp) : 0;
  });
}

extern "C" PARTRAIN_SPANK_EXPORT int slurm_spank_local_user_init(spank_t sp, int, char**) {
  return guarded("slurm_spank_local_user_init", -1,
                 [&] { return partrain::spank::check_at_launch(sp); });
}

extern "C" PARTRAIN_SPANK_EXPORT int slurm_spank_job_epilog(spank_t sp, int ac, char** av) {
  // 0 even on an error: a failing epilog drains the node. The job_script context calls no
  // slurm_spank_init, so the arguments are read here.
  return guarded("slurm_spank_job_epilog", 0,
                 [&] { return load_args(ac, av) ? partrain::spank::remove_secret_at_job_end(sp) : 0; });
}

extern "C" PARTRAIN_SPANK_EXPORT int slurm_spank_task_init(spank_t sp, int, char**) {
  // 0 even on an internal error: a failing task_init would drain the node.
  return guarded("slurm_spank_task_init", 0, [&] { return partrain::spank::set_task_env(sp); });
}
