// CUDA runtime and cuBLAS errors turned into partrain::Status, so nothing from the GPU
// path throws or exits: every launcher and allocation reports through its return value.
// Plain C++ (no device code): included by .cu files and by the backend's .cc files.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace partrain::engine::cuda {

// "cudaMalloc of 12 MiB: out of memory (cudaErrorMemoryAllocation)".
inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  std::string msg = std::string(what) + ": " + cudaGetErrorString(err) + " (" +
                    cudaGetErrorName(err) + ")";
  // A lost or absent device is 'unavailable' (another node may do); the rest are bugs.
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
      err == cudaErrorMemoryAllocation || err == cudaErrorDevicesUnavailable) {
    return Status::unavailable(msg + "; check nvidia-smi and the job's GPU allocation");
  }
  return Status::internal(msg);
}

inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

inline Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status::internal(std::string(what) + ": " + cublas_status_name(s));
}

// The last launch's error (a bad configuration shows here; a fault shows at the next sync).
inline Status launch_status(const char* kernel) {
  return cuda_status(cudaGetLastError(), kernel);
}

}  // namespace partrain::engine::cuda

#define PARTRAIN_CUDA_RETURN_IF_ERROR(call) \
  PARTRAIN_RETURN_IF_ERROR(::partrain::engine::cuda::cuda_status((call), #call))
#define PARTRAIN_CUBLAS_RETURN_IF_ERROR(call) \
  PARTRAIN_RETURN_IF_ERROR(::partrain::engine::cuda::cublas_status((call), #call))
