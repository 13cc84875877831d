// C++ side of the expert-parallel plugin ABI (expert.h). Write a class derived from
// partrain::sdk::ExpertStrategy, then one line exports it:
//
//   class MyEp : public partrain::sdk::ExpertStrategy {
//    public:
//     explicit MyEp(const partrain_expert_init_args_v1_t& args) { ... }   // may throw
//     void all_to_all(const float* in, const size_t* send, float* out, const size_t* recv) override;
//     void reduce(float* data, size_t count) override { ... }
//     void reduce_expert_grads(float* data, size_t count, float scale) override { ... }
//     void step_end(partrain_expert_stats_v1_t* stats) override { ... }
//   };
//   PARTRAIN_EXPERT_PLUGIN(MyEp, "myep", "1.0.0", PARTRAIN_CAP_CPU, "what it does")
//
// The macro defines the exported `partrain_expert_v1` struct; every call is wrapped in
// try/catch (plugin_sdk.h's guarded) so no exception crosses the C boundary.
// start_all_to_allv / wait below drive the host's all-to-all table.
//
// Header-only, C++17, standard library only: a plugin links nothing of partrain.
#ifndef PARTRAIN_EXPERT_SDK_H_
#define PARTRAIN_EXPERT_SDK_H_

#include <cstddef>

#include "partrain/expert.h"
#include "partrain/sdk.h" /* sdk::Error, detail::guarded, the collectives */

namespace partrain::sdk {

// Starts an all-to-all on the host's table; throws Error on failure.
inline void* start_all_to_allv(const partrain_alltoall_v1_t& a, const float* in, const size_t* send,
                               float* out, const size_t* recv) {
  char err[1024] = {0};
  void* work = nullptr;
  detail::check(a.all_to_allv(a.ctx, in, send, out, recv, &work, err, sizeof err), err);
  return work;
}

// Waits for an all-to-all started above; throws Error on failure.
inline void wait(const partrain_alltoall_v1_t& a, void* work) {
  char err[1024] = {0};
  detail::check(a.wait(a.ctx, work, err, sizeof err), err);
}

class ExpertStrategy {
 public:
  virtual ~ExpertStrategy() = default;
  virtual void all_to_all(const float* in, const size_t* send_counts, float* out,
                          const size_t* recv_counts) = 0;
  virtual void reduce(float* data, size_t count) = 0;
  virtual void reduce_expert_grads(float* data, size_t count, float scale) = 0;
  virtual void step_end(partrain_expert_stats_v1_t* /*stats*/) {}
};

namespace detail {

template <typename T>
struct ExpertTrampolines : TrampolineBase<ExpertStrategy> {
  static int init(const partrain_expert_init_args_v1_t* args, void** state, char* err,
                  size_t err_len) {
    return guarded(err, err_len, [&] {
      if (args == nullptr || state == nullptr || args->ep == nullptr || args->ep_all_to_all == nullptr) {
        throw Error(PARTRAIN_EINVAL, "init: null argument");
      }
      *state = static_cast<ExpertStrategy*>(new T(*args));
    });
  }
  static int all_to_all(void* state, const float* in, const size_t* send, float* out,
                        const size_t* recv, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->all_to_all(in, send, out, recv); });
  }
  static int reduce(void* state, float* data, size_t count, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->reduce(data, count); });
  }
  static int reduce_expert_grads(void* state, float* data, size_t count, float scale, char* err,
                                 size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->reduce_expert_grads(data, count, scale); });
  }
  static int step_end(void* state, partrain_expert_stats_v1_t* stats, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->step_end(stats); });
  }
};

}  // namespace detail
}  // namespace partrain::sdk

// Exports CLASS as the plugin's partrain_expert_v1. Use once per shared object, at
// namespace scope.
#define PARTRAIN_EXPERT_PLUGIN(CLASS, NAME, VERSION, CAPS, DESCRIPTION)                    \
  PARTRAIN_SDK_EXPORT(partrain_expert_v1_t, partrain_expert_v1) {                         \
      PARTRAIN_EXPERT_ABI_VERSION,                                                        \
      NAME,                                                                               \
      VERSION,                                                                            \
      CAPS,                                                                               \
      DESCRIPTION,                                                                        \
      &::partrain::sdk::detail::ExpertTrampolines<CLASS>::init,                           \
      &::partrain::sdk::detail::ExpertTrampolines<CLASS>::all_to_all,                     \
      &::partrain::sdk::detail::ExpertTrampolines<CLASS>::reduce,                         \
      &::partrain::sdk::detail::ExpertTrampolines<CLASS>::reduce_expert_grads,            \
      &::partrain::sdk::detail::ExpertTrampolines<CLASS>::step_end,                       \
      &::partrain::sdk::detail::ExpertTrampolines<CLASS>::finalize,                       \
  };

#endif  // PARTRAIN_EXPERT_SDK_H_
