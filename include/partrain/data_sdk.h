// C++ side of the data-family plugin ABI (data.h), version 2. Write a class derived from
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
#ifndef PARTRAIN_DATA_SDK_H_
#define PARTRAIN_DATA_SDK_H_

#include <type_traits>

#include "partrain/data.h"
#include "partrain/sdk.h"

namespace partrain::sdk {

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

template <typename T>
struct Trampolines : TrampolineBase<Strategy> {
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
};

}  // namespace detail
}  // namespace partrain::sdk

// Exports CLASS as the plugin's partrain_strategy_v2. Use once per shared object, at
// namespace scope.
#define PARTRAIN_STRATEGY_PLUGIN(CLASS, NAME, FAMILY, VERSION, CAPS, DESCRIPTION)          \
  PARTRAIN_SDK_EXPORT(partrain_strategy_v2_t, partrain_strategy_v2) {                     \
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

#endif  // PARTRAIN_DATA_SDK_H_
