// C++ side of the strategy-plugin ABI (plugin.h), version 2. Write a class derived from
// partrain::sdk::Strategy, then one line exports it:
//
//   class MySync : public partrain::sdk::Strategy {
//    public:
//     explicit MySync(const partrain_init_args_v2_t& args) { ... }   // may throw
//     void grads_ready(float* data, size_t offset, size_t count, float* shard) override { ... }
//     void grads_done() override { ... }
//     void step_end(partrain_sync_stats_v2_t* stats) override { ... }
//   };
//   PARTRAIN_STRATEGY_PLUGIN(MySync, "mysync", PARTRAIN_FAMILY_DATA, "1.0.0",
//                            PARTRAIN_CAP_CPU, "what it does, in one line")
//
// A sharding (ZeRO) plugin takes the plan too and sets its stage and shard there:
//     MyZero(const partrain_init_args_v2_t& args, partrain_data_plan_v2_t* plan);
//
// The macro defines the exported `partrain_strategy_v2` struct whose function pointers
// call the class. Every call is wrapped in try/catch: an exception becomes an error code
// and its what() the message, so none crosses the C boundary. Throw sdk::Error to choose
// the code (e.g. PARTRAIN_EINVAL for a bad [plugins.NAME] key).
//
// Header-only, C++17, standard library only: a plugin links nothing of partrain.
#ifndef PARTRAIN_PLUGIN_SDK_H_
#define PARTRAIN_PLUGIN_SDK_H_

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <map>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "partrain/plugin.h"

namespace partrain::sdk {

// An error with a PARTRAIN_E* code; its message is shown to the user.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// Base of a strategy. Override what the family and stage use; defaults do nothing.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual void step_begin(int64_t /*step*/) {}
  virtual void grads_ready(float* /*data*/, size_t /*offset*/, size_t /*count*/,
                           float* /*shard_grads*/) {}
  virtual void grads_release(size_t /*offset*/, size_t /*count*/) {}
  virtual void grads_done() {}
  virtual void params_gather(const float* /*shard_params*/, float* /*dst*/, size_t /*offset*/,
                             size_t /*count*/) {
    throw Error(PARTRAIN_EINTERNAL, "this plugin shards no parameters (params_gather)");
  }
  virtual void params_wait(float* /*dst*/) {}
  virtual void step_end(partrain_sync_stats_v2_t* /*stats*/) {}
};

namespace detail {
inline void check(int rc, const char* err) {
  if (rc != PARTRAIN_OK) throw Error(rc, err);
}
}  // namespace detail

// The host's collectives; each starts an operation and returns its handle for wait(), or
// throws Error on failure.
inline void* start_all_reduce(const partrain_comm_v2_t& comm, float* data, size_t count, int op) {
  char err[512] = {0};
  void* work = nullptr;
  detail::check(comm.all_reduce(comm.ctx, data, count, op, &work, err, sizeof err), err);
  return work;
}
inline void* start_reduce_scatter(const partrain_comm_v2_t& comm, const float* in, float* out,
                                  const std::vector<size_t>& counts, int op) {
  char err[512] = {0};
  void* work = nullptr;
  detail::check(comm.reduce_scatter(comm.ctx, in, out, counts.data(), op, &work, err, sizeof err), err);
  return work;
}
inline void* start_all_gather(const partrain_comm_v2_t& comm, const float* in, float* out,
                              const std::vector<size_t>& counts) {
  char err[512] = {0};
  void* work = nullptr;
  detail::check(comm.all_gather(comm.ctx, in, out, counts.data(), &work, err, sizeof err), err);
  return work;
}
inline void* start_broadcast(const partrain_comm_v2_t& comm, float* data, size_t count, int root) {
  char err[512] = {0};
  void* work = nullptr;
  detail::check(comm.broadcast(comm.ctx, data, count, root, &work, err, sizeof err), err);
  return work;
}
// Waits for an operation started above; throws Error on failure.
inline void wait(const partrain_comm_v2_t& comm, void* work) {
  char err[512] = {0};
  detail::check(comm.wait(comm.ctx, work, err, sizeof err), err);
}

// Reads the numeric keys of a plugin's [plugins.NAME] table (`key = number` lines, `#`
// comments). An unknown key or a value that is not a number is an Error(PARTRAIN_EINVAL)
// naming the table, the key and the fix.
inline std::map<std::string, double> config_numbers(const char* toml, const std::string& plugin,
                                                    const std::vector<std::string>& keys) {
  std::map<std::string, double> out;
  std::istringstream in(toml != nullptr ? toml : "");
  std::string line;
  auto trim = [](std::string t) {
    t.erase(0, t.find_first_not_of(" \t"));
    t.erase(t.find_last_not_of(" \t\r") + 1);
    return t;
  };
  while (std::getline(in, line)) {
    line = trim(line.substr(0, line.find('#')));
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    bool known = false;
    for (const std::string& k : keys) known = known || k == key;
    if (!known) {
      if (keys.empty()) {
        throw Error(PARTRAIN_EINVAL, "[plugins." + plugin + "]: unknown key '" + key +
                                         "'; this plugin takes no keys: remove it");
      }
      std::string list;
      for (const std::string& k : keys) list += (list.empty() ? "" : ", ") + k;
      throw Error(PARTRAIN_EINVAL, "[plugins." + plugin + "]: unknown key '" + key + "'; " +
                                       (keys.size() == 1 ? "the only key is " : "the keys are ") + list);
    }
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size()) {
      throw Error(PARTRAIN_EINVAL, "[plugins." + plugin + "] " + key + ": '" + value +
                                       "' is not a number");
    }
    out[key] = v;
  }
  return out;
}

namespace detail {

inline void copy_message(const char* msg, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::snprintf(err, err_len, "%s", msg);
}

// Runs f; turns any exception into a return code plus message.
template <typename F>
int guarded(char* err, size_t err_len, F&& f) noexcept {
  try {
    f();
    return PARTRAIN_OK;
  } catch (const Error& e) {
    copy_message(e.what(), err, err_len);
    return e.code();
  } catch (const std::bad_alloc&) {
    copy_message("out of memory", err, err_len);
    return PARTRAIN_EINTERNAL;
  } catch (const std::exception& e) {
    copy_message(e.what(), err, err_len);
    return PARTRAIN_EINTERNAL;
  } catch (...) {
    copy_message("unknown exception in plugin", err, err_len);
    return PARTRAIN_EINTERNAL;
  }
}

template <typename T>
struct Trampolines {
  static int init(const partrain_init_args_v2_t* args, partrain_data_plan_v2_t* plan,
                  void** state, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
      if (args == nullptr || state == nullptr) throw Error(PARTRAIN_EINVAL, "init: null argument");
      if constexpr (std::is_constructible_v<T, const partrain_init_args_v2_t&,
                                            partrain_data_plan_v2_t*>) {
        if (plan == nullptr) throw Error(PARTRAIN_EINVAL, "init: null plan");
        *state = static_cast<Strategy*>(new T(*args, plan));
      } else {
        *state = static_cast<Strategy*>(new T(*args));
      }
    });
  }
  static Strategy* self(void* state) { return static_cast<Strategy*>(state); }
  static int step_begin(void* state, int64_t step, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->step_begin(step); });
  }
  static int grads_ready(void* state, float* data, size_t offset, size_t count, float* shard,
                         char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->grads_ready(data, offset, count, shard); });
  }
  static int grads_release(void* state, size_t offset, size_t count, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->grads_release(offset, count); });
  }
  static int grads_done(void* state, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->grads_done(); });
  }
  static int params_gather(void* state, const float* shard, float* dst, size_t offset,
                           size_t count, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->params_gather(shard, dst, offset, count); });
  }
  static int params_wait(void* state, float* dst, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->params_wait(dst); });
  }
  static int step_end(void* state, partrain_sync_stats_v2_t* stats, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->step_end(stats); });
  }
  static void finalize(void* state) noexcept {
    try {
      delete self(state);
    } catch (...) {  // a destructor that throws must still not cross the boundary
    }
  }
};

}  // namespace detail
}  // namespace partrain::sdk

// Exports CLASS as the plugin's partrain_strategy_v2. Use once per shared object, at
// namespace scope.
#define PARTRAIN_STRATEGY_PLUGIN(CLASS, NAME, FAMILY, VERSION, CAPS, DESCRIPTION)          \
  extern "C" __attribute__((visibility("default")))                                       \
  const partrain_strategy_v2_t partrain_strategy_v2;                                     \
  extern "C" const partrain_strategy_v2_t partrain_strategy_v2 = {                       \
      PARTRAIN_PLUGIN_ABI_V2,                                                             \
      NAME,                                                                               \
      FAMILY,                                                                             \
      VERSION,                                                                            \
      CAPS,                                                                               \
      DESCRIPTION,                                                                        \
      &::partrain::sdk::detail::Trampolines<CLASS>::init,                                 \
      &::partrain::sdk::detail::Trampolines<CLASS>::step_begin,                           \
      &::partrain::sdk::detail::Trampolines<CLASS>::grads_ready,                          \
      &::partrain::sdk::detail::Trampolines<CLASS>::grads_release,                        \
      &::partrain::sdk::detail::Trampolines<CLASS>::grads_done,                           \
      &::partrain::sdk::detail::Trampolines<CLASS>::params_gather,                        \
      &::partrain::sdk::detail::Trampolines<CLASS>::params_wait,                          \
      &::partrain::sdk::detail::Trampolines<CLASS>::step_end,                             \
      &::partrain::sdk::detail::Trampolines<CLASS>::finalize,                             \
  };

#endif  // PARTRAIN_PLUGIN_SDK_H_
