// C++ side of the strategy-plugin ABI (plugin.h). Write a class derived from
// partrain::sdk::Strategy, then one line exports it:
//
//   class MySync : public partrain::sdk::Strategy {
//    public:
//     explicit MySync(const partrain_init_args_v1_t& args) { ... }   // may throw
//     void grads_ready(float* g, size_t offset, size_t count) override { ... }
//     void grads_done(float* g, partrain_sync_stats_v1_t* stats) override { ... }
//   };
//   PARTRAIN_STRATEGY_PLUGIN(MySync, "mysync", PARTRAIN_FAMILY_DATA, "1.0.0",
//                            PARTRAIN_CAP_CPU, "what it does, in one line")
//
// The macro defines the exported `partrain_strategy_v1` struct whose function pointers
// call the class. Every call is wrapped in try/catch: an exception becomes an error code
// and its what() the message, so none crosses the C boundary. Throw sdk::Error to choose
// the code (e.g. PARTRAIN_EINVAL for a bad [plugins.NAME] key).
//
// Header-only, C++17, standard library only: a plugin links nothing of partrain.
#ifndef PARTRAIN_PLUGIN_SDK_H_
#define PARTRAIN_PLUGIN_SDK_H_

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

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

// Base of a strategy. Override what the family uses; defaults do nothing.
class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual void step_begin(int64_t /*step*/) {}
  virtual void grads_ready(float* /*grads*/, size_t /*offset*/, size_t /*count*/) {}
  virtual void grads_done(float* /*grads*/, partrain_sync_stats_v1_t* /*stats*/) {}
};

// Starts an all-reduce through the host's communicator; throws Error on failure.
inline void* start_all_reduce(const partrain_comm_v1_t& comm, float* data, size_t count, int op) {
  char err[512] = {0};
  void* work = nullptr;
  const int rc = comm.all_reduce(comm.ctx, data, count, op, &work, err, sizeof err);
  if (rc != PARTRAIN_OK) throw Error(rc, err);
  return work;
}
// Waits for an operation started with start_all_reduce; throws Error on failure.
inline void wait(const partrain_comm_v1_t& comm, void* work) {
  char err[512] = {0};
  const int rc = comm.wait(comm.ctx, work, err, sizeof err);
  if (rc != PARTRAIN_OK) throw Error(rc, err);
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
  static int init(const partrain_init_args_v1_t* args, void** state, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
      if (args == nullptr || state == nullptr) throw Error(PARTRAIN_EINVAL, "init: null argument");
      *state = static_cast<Strategy*>(new T(*args));
    });
  }
  static int step_begin(void* state, int64_t step, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { static_cast<Strategy*>(state)->step_begin(step); });
  }
  static int grads_ready(void* state, float* grads, size_t offset, size_t count, char* err,
                         size_t err_len) {
    return guarded(err, err_len,
                   [&] { static_cast<Strategy*>(state)->grads_ready(grads, offset, count); });
  }
  static int grads_done(void* state, float* grads, partrain_sync_stats_v1_t* stats, char* err,
                        size_t err_len) {
    return guarded(err, err_len, [&] { static_cast<Strategy*>(state)->grads_done(grads, stats); });
  }
  static void finalize(void* state) noexcept {
    try {
      delete static_cast<Strategy*>(state);
    } catch (...) {  // a destructor that throws must still not cross the boundary
    }
  }
};

}  // namespace detail
}  // namespace partrain::sdk

// Exports CLASS as the plugin's partrain_strategy_v1. Use once per shared object, at
// namespace scope.
#define PARTRAIN_STRATEGY_PLUGIN(CLASS, NAME, FAMILY, VERSION, CAPS, DESCRIPTION)          \
  extern "C" __attribute__((visibility("default")))                                       \
  const partrain_strategy_v1_t partrain_strategy_v1;                                     \
  extern "C" const partrain_strategy_v1_t partrain_strategy_v1 = {                       \
      PARTRAIN_PLUGIN_ABI_VERSION,                                                        \
      NAME,                                                                               \
      FAMILY,                                                                             \
      VERSION,                                                                            \
      CAPS,                                                                               \
      DESCRIPTION,                                                                        \
      &::partrain::sdk::detail::Trampolines<CLASS>::init,                                 \
      &::partrain::sdk::detail::Trampolines<CLASS>::step_begin,                           \
      &::partrain::sdk::detail::Trampolines<CLASS>::grads_ready,                          \
      &::partrain::sdk::detail::Trampolines<CLASS>::grads_done,                           \
      &::partrain::sdk::detail::Trampolines<CLASS>::finalize,                             \
  };

#endif  // PARTRAIN_PLUGIN_SDK_H_
