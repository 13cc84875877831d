// A thin graph builder over cuDNN's backend API (cudnn_graph.h), the part of cudnn-frontend
// that partrain needs: tensors, pointwise / reduction / matmul / reshape operations, an
// operation graph, the heuristic's engine configurations, an execution plan and its variant
// pack. cuDNN is loaded at run time (dlopen "libcudnn.so.9", or $PARTRAIN_CUDNN_LIBRARY), so
// binaries start and fall back to partrain's own attention where cuDNN is absent.
//
// Usage: CudnnLib::get() once; a CudnnGraph collects tensors (each with a unique id) and
// operations; build(handle) finalizes the graph and picks the first engine configuration
// (heuristic mode A, then the fallback list) that finalizes into a plan, skipping those
// marked non-deterministic when asked; execute() runs it with a pointer per non-virtual
// tensor id. Errors are Status values naming the call and cuDNN's message.
//
// Plain C++ (no device code); every call also works without a GPU up to the operation
// graph, which needs a handle (tests/engine exercise that part on CPU machines).
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace partrain::engine::cuda {

// The cuDNN entry points partrain calls, loaded once.
struct CudnnLib {
  size_t (*GetVersion)() = nullptr;
  const char* (*GetErrorString)(cudnnStatus_t) = nullptr;
  void (*GetLastErrorString)(char*, size_t) = nullptr;  // null before cuDNN 9
  cudnnStatus_t (*Create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*Destroy)(cudnnHandle_t) = nullptr;
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*BackendCreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*BackendDestroyDescriptor)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*BackendFinalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*BackendSetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void*) = nullptr;
  cudnnStatus_t (*BackendGetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t*, void*) = nullptr;
  cudnnStatus_t (*BackendExecute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;
  size_t version = 0;  // e.g. 91900 for 9.19.0

  // The process's copy, loaded on first call; an error (library not found, symbol missing,
  // major version other than 9) says which and how to fix it.
  static Result<const CudnnLib*> get();
  // "what: CUDNN_STATUS_...: cuDNN's last message" (ok for CUDNN_STATUS_SUCCESS).
  Status check(cudnnStatus_t s, const std::string& what) const;
};

// One backend descriptor, destroyed with its owner.
class CudnnDesc {
 public:
  CudnnDesc() = default;
  ~CudnnDesc() { reset(); }
  CudnnDesc(CudnnDesc&& o) noexcept : lib_(o.lib_), d_(std::exchange(o.d_, nullptr)) {}
  CudnnDesc& operator=(CudnnDesc&& o) noexcept {
    if (this != &o) {
      reset();
      lib_ = o.lib_;
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;

  static Result<CudnnDesc> create(const CudnnLib& lib, cudnnBackendDescriptorType_t type);
  cudnnBackendDescriptor_t get() const { return d_; }
  void reset();

  Status set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
             const void* value, const char* what) const;
  Status set_i64(cudnnBackendAttributeName_t name, int64_t v, const char* what) const {
    return set(name, CUDNN_TYPE_INT64, 1, &v, what);
  }
  Status set_i64s(cudnnBackendAttributeName_t name, const std::vector<int64_t>& v, const char* what) const {
    return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()), v.data(), what);
  }
  Status set_desc(cudnnBackendAttributeName_t name, const CudnnDesc& d, const char* what) const {
    cudnnBackendDescriptor_t raw = d.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw, what);
  }
  Status finalize(const char* what) const;

 private:
  const CudnnLib* lib_ = nullptr;
  cudnnBackendDescriptor_t d_ = nullptr;
};

// A graph under construction. Tensor ids are assigned in order from 1.
class CudnnGraph {
 public:
  struct TensorSpec {
    std::vector<int64_t> dims, strides;
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    bool is_virtual = false;
    bool by_value = false;  // a host scalar passed in the variant pack
  };

  explicit CudnnGraph(const CudnnLib& lib) : lib_(lib) {}

  // A tensor; returns its id (0 on error, kept in status()).
  int64_t tensor(const TensorSpec& spec);
  int64_t real(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type) {
    return tensor({std::move(dims), std::move(strides), type, false, false});
  }
  int64_t virt(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor({std::move(dims), std::move(strides), type, true, false});
  }
  // A by-value fp32 scalar [1,1,1,1]; its value travels in the variant pack.
  int64_t scalar(float value);
  const TensorSpec& spec(int64_t id) const { return specs_[static_cast<size_t>(id - 1)]; }

  // y = mode(x [, b [, t]]) elementwise with broadcasting; y must exist (virt/real).
  // `axis` for GEN_INDEX; `compute` the math precision.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  void matmul(int64_t a, int64_t b, int64_t c);
  void reshape(int64_t x, int64_t y);

  // The first error of any call above (ok when none).
  const Status& status() const { return status_; }
  size_t num_ops() const { return ops_.size(); }

  // Finalizes the operation graph on `handle` and picks a plan; `deterministic` skips
  // engines cuDNN marks non-deterministic.
  Status build(cudnnHandle_t handle, bool deterministic);
  int64_t workspace_bytes() const { return workspace_; }
  // Runs the plan. `ptrs` pairs every non-virtual, non-by-value tensor id with its device
  // pointer; by-value scalars are added here.
  Status execute(cudnnHandle_t handle, const std::vector<std::pair<int64_t, void*>>& ptrs,
                 void* workspace) const;
  std::string describe_engine() const { return engine_; }

 private:
  void keep(Status s);
  const CudnnLib& lib_;
  Status status_;
  std::vector<TensorSpec> specs_;
  std::vector<CudnnDesc> tensors_;  // by id - 1
  std::vector<float> scalar_values_;
  std::vector<int64_t> scalar_ids_;
  std::vector<CudnnDesc> ops_, op_parts_;  // operations, and the descriptors they hold
  CudnnDesc graph_, plan_;
  int64_t workspace_ = 0;
  std::string engine_;
};

}  // namespace partrain::engine::cuda
