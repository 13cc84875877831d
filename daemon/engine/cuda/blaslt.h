// cuBLASLt with cached descriptors and algorithms. A transformer step calls a handful of
// GEMM shapes thousands of times; building four descriptors and asking the heuristic for
// each call costs host time on every one (tens of microseconds, more than a small GEMM's
// device time). LtCache keeps, per call shape (LtKey: sizes, leading dimensions, types,
// transposes, epilogue, operand alignments), the descriptors and the heuristic's first
// algorithm; a call then only sets the epilogue's pointers and runs cublasLtMatmul.
//
// A shape the heuristic refuses is remembered as refused, so the caller's fallback (plain
// cuBLAS, or the unfused kernels) runs without asking again. The same key always gets the
// same algorithm, so results are reproducible run to run.
//
// Plain C++ (no device code): the launchers in matmul.cu call lt_matmul.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"

namespace partrain::engine::cuda {

struct Context;

// One GEMM shape, column-major as cuBLASLt sees it: D[m,n] = op(A)[m,k] op(B)[k,n] (+ beta C),
// C and D share type and layout.
struct LtKey {
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int64_t aux_ld = 0;  // GELU input matrix's leading dimension (GELU_AUX*, DGELU)
  // Largest power of two (<= 256) dividing each pointer: the heuristic picks by them.
  uint32_t align_a = 0, align_b = 0, align_d = 0, align_bias = 0, align_aux = 0;
  bool operator==(const LtKey& o) const;
};

// The pointers and scalars of one call.
struct LtArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;  // also C
  float beta = 0.0f;
  const void* bias = nullptr;  // bias (forward) or bias gradient output (BGRAD*)
  const void* aux = nullptr;   // GELU input: written by GELU_AUX*, read by DGELU
};

struct LtStats {
  int64_t calls = 0, hits = 0, refused = 0;
};

class LtCache {
 public:
  LtCache();
  ~LtCache();
  LtCache(const LtCache&) = delete;
  LtCache& operator=(const LtCache&) = delete;

  // Runs one GEMM through the cached plan of `key` (built on first use). Returns
  // Status::unavailable when cuBLASLt has no algorithm for the key (the caller falls back),
  // any other error as it is.
  Status run(const Context& ctx, const LtKey& key, const LtArgs& args);
  const LtStats& stats() const { return stats_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry;
  Entry* find_or_build(const Context& ctx, const LtKey& key, const LtArgs& args);
  std::vector<std::unique_ptr<Entry>> entries_;
  LtStats stats_;
};

// The largest power of two (<= 256) dividing the address (256 for null).
uint32_t lt_alignment(const void* p);

}  // namespace partrain::engine::cuda
