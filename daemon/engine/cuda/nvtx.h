// NVTX ranges (NVIDIA's tool annotations) around phases and ops, so a profiler attached to
// a GPU run (Nsight Systems, ncu's --nvtx filters) shows where a step's time goes. Header
// only: NVTX v3 ships with the CUDA toolkit and costs a few nanoseconds per range when no
// tool is attached. Without the header the ranges compile to nothing.
#pragma once

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define PARTRAIN_HAVE_NVTX 1
#endif
#endif

namespace partrain::engine::cuda {

// Pushes `name` (a string that outlives the range) for the scope's lifetime.
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) {
#ifdef PARTRAIN_HAVE_NVTX
    nvtxRangePushA(name);
#else
    (void)name;
#endif
  }
  ~NvtxRange() {
#ifdef PARTRAIN_HAVE_NVTX
    nvtxRangePop();
#endif
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace partrain::engine::cuda
