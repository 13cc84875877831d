// C++ side of the tensor-parallel plugin ABI (tensor.h). Write a class derived from
// partrain::sdk::TensorStrategy, then one line exports it:
//
//   class MyTp : public partrain::sdk::TensorStrategy {
//    public:
//     explicit MyTp(const partrain_tensor_init_args_v1_t& args) { ... }   // may throw
//     void reduce(float* data, size_t count, int op) override { ... }
//     void gather(const float* rows, float* full, size_t count) override { ... }
//     void scatter(const float* full, float* rows, size_t count) override { ... }
//     void step_end(partrain_tensor_stats_v1_t* stats) override { ... }
//   };
//   PARTRAIN_TENSOR_PLUGIN(MyTp, "mytp", "1.0.0", PARTRAIN_CAP_CPU, "what it does")
//
// The macro defines the exported `partrain_tensor_v1` struct; every call is wrapped in
// try/catch (plugin_sdk.h's guarded) so no exception crosses the C boundary.
//
// Header-only, C++17, standard library only: a plugin links nothing of partrain.
#ifndef PARTRAIN_TENSOR_SDK_H_
#define PARTRAIN_TENSOR_SDK_H_

#include <cstddef>

#include "partrain/sdk.h" /* sdk::Error, detail::guarded, the collectives */
#include "partrain/tensor.h"

namespace partrain::sdk {

class TensorStrategy {
 public:
  virtual ~TensorStrategy() = default;
  virtual void reduce(float* data, size_t count, int op) = 0;
  virtual void gather(const float* rows, float* full, size_t count) = 0;
  virtual void scatter(const float* full, float* rows, size_t count) = 0;
  virtual void step_end(partrain_tensor_stats_v1_t* /*stats*/) {}
};

namespace detail {

template <typename T>
struct TensorTrampolines : TrampolineBase<TensorStrategy> {
  static int init(const partrain_tensor_init_args_v1_t* args, void** state, char* err,
                  size_t err_len) {
    return guarded(err, err_len, [&] {
      if (args == nullptr || state == nullptr || args->tp == nullptr) {
        throw Error(PARTRAIN_EINVAL, "init: null argument");
      }
      *state = static_cast<TensorStrategy*>(new T(*args));
    });
  }
  static int reduce(void* state, float* data, size_t count, int op, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->reduce(data, count, op); });
  }
  static int gather(void* state, const float* rows, float* full, size_t count, char* err,
                    size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->gather(rows, full, count); });
  }
  static int scatter(void* state, const float* full, float* rows, size_t count, char* err,
                     size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->scatter(full, rows, count); });
  }
  static int step_end(void* state, partrain_tensor_stats_v1_t* stats, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { self(state)->step_end(stats); });
  }
};

}  // namespace detail
}  // namespace partrain::sdk

// Exports CLASS as the plugin's partrain_tensor_v1. Use once per shared object, at
// namespace scope.
#define PARTRAIN_TENSOR_PLUGIN(CLASS, NAME, VERSION, CAPS, DESCRIPTION)                    \
  PARTRAIN_SDK_EXPORT(partrain_tensor_v1_t, partrain_tensor_v1) {                         \
      PARTRAIN_TENSOR_ABI_VERSION,                                                        \
      NAME,                                                                               \
      VERSION,                                                                            \
      CAPS,                                                                               \
      DESCRIPTION,                                                                        \
      &::partrain::sdk::detail::TensorTrampolines<CLASS>::init,                           \
      &::partrain::sdk::detail::TensorTrampolines<CLASS>::reduce,                         \
      &::partrain::sdk::detail::TensorTrampolines<CLASS>::gather,                         \
      &::partrain::sdk::detail::TensorTrampolines<CLASS>::scatter,                        \
      &::partrain::sdk::detail::TensorTrampolines<CLASS>::step_end,                       \
      &::partrain::sdk::detail::TensorTrampolines<CLASS>::finalize,                       \
  };

#endif  // PARTRAIN_TENSOR_SDK_H_
