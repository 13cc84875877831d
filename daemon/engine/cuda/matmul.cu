// Linear layers through cuBLASLt (forward, bias fused as the epilogue) and cuBLAS (backward),
// bf16 or fp32 inputs with fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 shortcut, so the
// fp32 path matches the CPU reference). Row-major [N,C] is column-major [C,N], so every
// product is written as its transpose. Also the Context: stream, handles, workspaces.
#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = 32u << 20;
constexpr size_t kScratchBytes = 16u << 20;

// RAII for the four cuBLASLt descriptors of one call.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two (<= 256) dividing the address: cuBLASLt assumes 256-byte aligned
// operands unless told otherwise, and parameter views into a flat buffer are not.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

}  // namespace

Status context_create(Context* ctx, int device) {
  *ctx = Context{};
  ctx->device = device;
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  PARTRAIN_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, device));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasCreate(&ctx->blas));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasSetStream(ctx->blas, ctx->stream));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&ctx->lt));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMalloc(&ctx->lt_workspace, kLtWorkspaceBytes));
  ctx->lt_workspace_bytes = kLtWorkspaceBytes;
  // cuBLAS and cuBLASLt run on the same stream, one call at a time: they share the workspace.
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(ctx->blas, ctx->lt_workspace, ctx->lt_workspace_bytes));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&ctx->scratch), kScratchBytes));
  ctx->scratch_bytes = kScratchBytes;
  return Status::ok();
}

void context_destroy(Context* ctx) {
  if (ctx->stream) cudaStreamSynchronize(ctx->stream);
  if (ctx->scratch) cudaFree(ctx->scratch);
  if (ctx->lt_workspace) cudaFree(ctx->lt_workspace);
  if (ctx->lt) cublasLtDestroy(ctx->lt);
  if (ctx->blas) cublasDestroy(ctx->blas);
  if (ctx->stream) cudaStreamDestroy(ctx->stream);
  *ctx = Context{};
}

namespace {

template <typename Act>
__global__ void add_bias_kernel(Act* out, const Act* bias, int N, int OC) {
  const size_t total = static_cast<size_t>(N) * OC;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = from_f32<Act>(to_f32(out[i]) + to_f32(bias[i % OC]));
  }
}

// The fast path: one cuBLASLt call with the bias fused as the epilogue.
template <typename Act>
Status lt_matmul_forward(const Context& ctx, Act* out, const Act* inp, const Act* w,
                         const Act* bias, int N, int C, int OC) {
  // out^T [OC,N] = (w [C,OC] col-major)^T  x  inp [C,N] col-major.
  constexpr cudaDataType_t type = cuda_data_type<Act>();
  LtCall call;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      call.op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      call.op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        call.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    const void* bias_ptr = bias;
    PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        call.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_ptr, sizeof(bias_ptr)));
  }
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&call.a, type, C, OC, C));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&call.b, type, C, N, C));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&call.d, type, OC, N, OC));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&call.pref));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx.lt_workspace_bytes,
      sizeof(ctx.lt_workspace_bytes)));
  const uint32_t align_a = alignment_of(w), align_b = alignment_of(inp), align_d = alignment_of(out);
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(
      ctx.lt, call.op, call.a, call.b, call.d, call.d, call.pref, 1, &heuristic, &found));
  if (found == 0) {
    return Status::internal("matmul_forward: cuBLASLt has no algorithm for N=" +
                            std::to_string(N) + " C=" + std::to_string(C) +
                            " OC=" + std::to_string(OC));
  }
  const float alpha = 1.0f, beta = 0.0f;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(ctx.lt, call.op, &alpha, w, call.a, inp, call.b,
                                                 &beta, out, call.d, out, call.d,
                                                 &heuristic.algo, ctx.lt_workspace,
                                                 ctx.lt_workspace_bytes, ctx.stream));
  return Status::ok();
}

}  // namespace

template <typename Act>
Status matmul_forward(const Context& ctx, Act* out, const Act* inp, const Act* w,
                      const Act* bias, int N, int C, int OC) {
  if (lt_matmul_forward(ctx, out, inp, w, bias, N, C, OC).is_ok()) return Status::ok();
  // cuBLASLt refused this shape or alignment: plain cuBLAS, then the bias as its own pass.
  constexpr cudaDataType_t type = cuda_data_type<Act>();
  const float one = 1.0f, zero = 0.0f;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(ctx.blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w,
                                               type, C, inp, type, C, &zero, out, type, OC,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias == nullptr) return Status::ok();
  add_bias_kernel<<<grid_for(static_cast<size_t>(N) * OC, 256), 256, 0, ctx.stream>>>(out, bias, N, OC);
  return launch_status("matmul_forward(bias)");
}

namespace {
template <typename Act>
struct ColumnOf {
  const Act* x;
  int C;
  __device__ void operator()(int n, int c, float* vals) const {
    vals[0] = to_f32(x[static_cast<size_t>(n) * C + c]);
  }
};
}  // namespace

template <typename Act>
Status matmul_backward(const Context& ctx, Act* dinp, float* dw, float* dbias, const Act* dout,
                       const Act* inp, const Act* w, int N, int C, int OC) {
  constexpr cudaDataType_t type = cuda_data_type<Act>();
  const float one = 1.0f;
  if (dinp != nullptr) {
    // dinp^T [C,N] += w [C,OC] x dout^T [OC,N]   (all column-major views)
    PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC,
                                                 &one, w, type, C, dout, type, OC, &one, dinp,
                                                 type, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (dw != nullptr) {
    // dw^T [C,OC] += inp^T [C,N] x dout [N,OC]
    PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N,
                                                 &one, inp, type, C, dout, type, OC, &one, dw,
                                                 CUDA_R_32F, C, CUBLAS_COMPUTE_32F,
                                                 CUBLAS_GEMM_DEFAULT));
  }
  if (dbias != nullptr) {
    PARTRAIN_RETURN_IF_ERROR(
        column_sums<1>(ctx, ColumnOf<Act>{dout, OC}, N, OC, ColumnOutputs<1>{{dbias}}));
  }
  return Status::ok();
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status matmul_forward<Act>(const Context&, Act*, const Act*, const Act*,            \
                                      const Act*, int, int, int);                              \
  template Status matmul_backward<Act>(const Context&, Act*, float*, float*, const Act*,       \
                                       const Act*, const Act*, int, int, int);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
