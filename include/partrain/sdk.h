// C++ helpers every family's SDK header shares (abi.h is the C side): sdk::Error, the
// host's collectives as calls that throw, a plugin table's numeric keys, and
// detail::guarded, which turns any exception into a return code so none crosses the C
// boundary, and what every family's trampolines and export macro share
// (detail::TrampolineBase, PARTRAIN_SDK_EXPORT). Header-only, C++17, standard library only: a plugin links nothing of partrain.
#ifndef PARTRAIN_SDK_H_
#define PARTRAIN_SDK_H_

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <map>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "partrain/abi.h"

namespace partrain::sdk {

// An error with a PARTRAIN_E* code; its message is shown to the user.
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
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

// What every family's trampolines share (T's base class, the strategy the state points to):
// the state pointer as that class, and its deletion, where a destructor that throws must
// not cross the C boundary either.
template <typename Strategy>
struct TrampolineBase {
  static Strategy* self(void* state) { return static_cast<Strategy*>(state); }
  static void finalize(void* state) noexcept {
    try {
      delete self(state);
    } catch (...) {
    }
  }
};

}  // namespace detail
}  // namespace partrain::sdk

// The head of every family's export macro: SYMBOL, a const TYPE with C linkage that the
// shared object exports (the loader looks it up by name); the braced table follows.
#define PARTRAIN_SDK_EXPORT(TYPE, SYMBOL)                                   \
  extern "C" __attribute__((visibility("default"))) const TYPE SYMBOL;      \
  extern "C" const TYPE SYMBOL =

#endif  // PARTRAIN_SDK_H_
