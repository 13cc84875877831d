// Helpers of CudaBackend's ops (cuda_backend.cc, cuda_backend_attention.cc): dtype dispatch
// and checks. Internal to engine/cuda.
#pragma once

#include <initializer_list>
#include <string>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/cuda/kernels.h"

namespace partrain::engine::cuda {

// Calls f with a value of the C++ type behind a float dtype.
template <typename F>
inline Status dispatch(DType t, F&& f) {
  if (t == DType::kBF16) return f(bf16{});
  if (t == DType::kF32) return f(float{});
  return Status::internal(std::string("cuda backend: op does not take dtype ") + dtype_name(t));
}

// Non-empty tensors of one op must share the activation dtype.
inline Status same_dtype(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (t->empty()) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->dtype != first->dtype) {
      return Status::internal(std::string("cuda backend: ") + op + " mixes " +
                              dtype_name(first->dtype) + " and " + dtype_name(t->dtype) +
                              " tensors");
    }
  }
  return Status::ok();
}

// An fp32 tensor's pointer (null when empty); other dtypes are an error.
inline Status f32(const char* op, const Tensor& t, float** out) {
  *out = nullptr;
  if (t.empty()) return Status::ok();
  if (t.dtype != DType::kF32) {
    return Status::internal(std::string("cuda backend: ") + op + " wants an f32 tensor, got " +
                            dtype_name(t.dtype));
  }
  *out = t.ptr<float>();
  return Status::ok();
}

inline size_t n_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

}  // namespace partrain::engine::cuda
