// cblas_sgemm by definition: C = alpha op(A) op(B) + beta C, row- or column-major, with
// double accumulation per output element (a reference, not a fast path).
#include "cblas.h"

#include <cstddef>

namespace {

// Element (i, j) of op(X) for a row-major X with leading dimension ld.
inline float at(const float* x, int ld, bool trans, int i, int j) {
  return trans ? x[static_cast<size_t>(j) * ld + i] : x[static_cast<size_t>(i) * ld + j];
}

}  // namespace

extern "C" void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transa,
                            enum CBLAS_TRANSPOSE transb, int m, int n, int k, float alpha,
                            const float* a, int lda, const float* b, int ldb, float beta, float* c,
                            int ldc) {
  if (order == CblasColMajor) {
    // Column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T.
    cblas_sgemm(CblasRowMajor, transb, transa, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc);
    return;
  }
  const bool ta = transa != CblasNoTrans, tb = transb != CblasNoTrans;
#pragma omp parallel for
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int p = 0; p < k; ++p) acc += static_cast<double>(at(a, lda, ta, i, p)) * at(b, ldb, tb, p, j);
      float* out = c + static_cast<size_t>(i) * ldc + j;
      *out = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * *out));
    }
  }
}
