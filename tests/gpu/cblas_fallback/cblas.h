// The one CBLAS routine the CPU reference kernels call (cblas_sgemm), for GPU-only builds on
// machines without OpenBLAS (daemon/engine/cuda/GpuOnly.cmake uses it only then). Same
// declaration as the reference CBLAS header; the implementation is a plain blocked loop,
// fast enough for the small shapes of the gpu tests.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
typedef enum CBLAS_ORDER CBLAS_LAYOUT;

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transa, enum CBLAS_TRANSPOSE transb,
                 int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
                 float beta, float* c, int ldc);

#ifdef __cplusplus
}
#endif
