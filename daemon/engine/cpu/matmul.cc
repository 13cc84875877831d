// Linear layers: out = inp @ w^T + bias with w [OC, C] (nn.Linear layout), via OpenBLAS.
//
// Threading: OpenBLAS is kept single-threaded and each OpenMP thread runs cblas_sgemm on
// its own block of the output. Letting the pthreads build of OpenBLAS start its own
// threads next to OpenMP's leaves two sets of spinning threads fighting for the same
// cores between kernels; on a busy 2-core machine that made a tiny model 100x slower.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "engine/cpu/kernels.h"

namespace partrain::engine::cpu {
namespace {

void single_threaded_blas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

// C[M,N] = A' B' + beta C (row-major; A' = A or A^T, B' = B or B^T), the larger of M and N
// split across the OpenMP threads in blocks of 16.
void gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  single_threaded_blas();
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double flops = 2.0 * M * N * K;
  if (threads == 1 || flops < 2e5) {
    cblas_sgemm(CblasRowMajor, opa, opb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_m = M >= N;
  const int extent = split_m ? M : N;
  const int chunk = ((extent + threads - 1) / threads + 15) / 16 * 16;
  const int parts = (extent + chunk - 1) / chunk;
#pragma omp parallel for schedule(static, 1) num_threads(threads)
  for (int p = 0; p < parts; ++p) {
    const int s = p * chunk, n = std::min(chunk, extent - s);
    if (split_m) {
      const float* a = ta ? A + s : A + static_cast<size_t>(s) * lda;
      cblas_sgemm(CblasRowMajor, opa, opb, n, N, K, 1.0f, a, lda, B, ldb, beta,
                  C + static_cast<size_t>(s) * ldc, ldc);
    } else {
      const float* b = tb ? B + static_cast<size_t>(s) * ldb : B + s;
      cblas_sgemm(CblasRowMajor, opa, opb, M, n, K, 1.0f, A, lda, b, ldb, beta, C + s, ldc);
    }
  }
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* w, const float* bias, int N, int C,
                    int OC) {
  // Seed out with the bias rows, then let the GEMM add inp @ w^T on top (beta = 1).
  float beta = 0.0f;
  if (bias != nullptr) {
#pragma omp parallel for
    for (int n = 0; n < N; ++n) std::memcpy(out + static_cast<size_t>(n) * OC, bias, sizeof(float) * OC);
    beta = 1.0f;
  }
  gemm(false, true, N, OC, C, inp, C, w, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout, const float* inp,
                     const float* w, int N, int C, int OC) {
  // dinp[N,C] += dout[N,OC] @ w[OC,C]
  if (dinp != nullptr) gemm(false, false, N, C, OC, dout, OC, w, C, 1.0f, dinp, C);
  // dw[OC,C] += dout^T[OC,N] @ inp[N,C]
  if (dw != nullptr) gemm(true, false, OC, C, N, dout, OC, inp, C, 1.0f, dw, C);
  // dbias[o] += sum_n dout[n,o]; each thread owns a block of outputs, rows summed in order.
  if (dbias != nullptr) {
    constexpr int kBlock = 64;
    const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for
    for (int blk = 0; blk < blocks; ++blk) {
      const int o0 = blk * kBlock, o1 = o0 + kBlock < OC ? o0 + kBlock : OC;
      for (int n = 0; n < N; ++n) {
        const float* d = dout + static_cast<size_t>(n) * OC;
        for (int o = o0; o < o1; ++o) dbias[o] += d[o];
      }
    }
  }
}

}  // namespace partrain::engine::cpu
