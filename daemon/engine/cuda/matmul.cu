// Linear layers. Fast path ("lt"): every GEMM through a cached cuBLASLt plan (blaslt.h), with
// the bias as the forward epilogue; with "epilogue" also GELU in the fc GEMM (GELU_AUX_BIAS,
// keeping the pre-activation for backward), its gradient in the next GEMM's input gradient
// (DGELU) and the bias gradient in the weight-gradient GEMM (BGRADB). Previous path (and the
// fallback wherever cuBLASLt refuses a shape): an uncached cuBLASLt call forward, cuBLAS
// backward, the bias and GELU as their own kernels, bias gradients as fixed-order column sums.
//
// bf16 or fp32 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32 shortcut, so the fp32
// path matches the CPU reference). Row-major [N,C] is column-major [C,N], so every product is
// written as its transpose. Also the Context: stream, handles, workspaces, options.
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/cuda/blaslt.h"
#include "engine/cuda/common.cuh"

namespace partrain::engine::cuda {
namespace {

constexpr size_t kLtWorkspaceBytes = 32u << 20;
constexpr size_t kScratchBytes = 16u << 20;

constexpr const char* kPathNames[] = {"lt", "epilogue", "norm", "vec", "adamw", "cudnn"};
constexpr int kNumPaths = 6;
bool& path_flag(KernelOptions& o, int i) {
  switch (i) {
    case 0: return o.lt_cache;
    case 1: return o.epilogues;
    case 2: return o.fused_norm;
    case 3: return o.vector_io;
    case 4: return o.multi_adamw;
    default: return o.cudnn_attention;
  }
}

}  // namespace

Status parse_kernel_paths(const char* spec, KernelOptions* out) {
  const std::string s = spec == nullptr ? "" : spec;
  KernelOptions o;
  if (s.empty() || s == "all") {
    *out = o;
    return Status::ok();
  }
  for (int i = 0; i < kNumPaths; ++i) path_flag(o, i) = false;
  if (s != "none") {
    size_t at = 0;
    while (at <= s.size()) {
      const size_t end = s.find(',', at) == std::string::npos ? s.size() : s.find(',', at);
      const std::string name = s.substr(at, end - at);
      bool known = false;
      for (int i = 0; i < kNumPaths; ++i) {
        if (name == kPathNames[i]) path_flag(o, i) = known = true;
      }
      if (!known) {
        return Status::invalid("PARTRAIN_CUDA_PATHS='" + s + "': unknown path '" + name +
                               "'; use all, none, or a list of lt, epilogue, norm, vec, adamw, cudnn");
      }
      at = end + 1;
    }
  }
  *out = o;
  return Status::ok();
}

const char* kernel_paths_name(const KernelOptions& o, char* buf, size_t n) {
  std::string s;
  KernelOptions copy = o;
  for (int i = 0; i < kNumPaths; ++i) {
    if (path_flag(copy, i)) s += (s.empty() ? "" : ",") + std::string(kPathNames[i]);
  }
  if (s.empty()) s = "none";
  if (n > 0) {
    std::strncpy(buf, s.c_str(), n - 1);
    buf[n - 1] = '\0';
  }
  return buf;
}

Status context_create(Context* ctx, int device) {
  *ctx = Context{};
  ctx->device = device;
  PARTRAIN_RETURN_IF_ERROR(parse_kernel_paths(std::getenv("PARTRAIN_CUDA_PATHS"), &ctx->opt));
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
  PARTRAIN_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&ctx->bias_scratch), kBiasScratchFloats * sizeof(float)));
  ctx->lt_cache = new LtCache();
  ctx->cudnn = cudnn_attention_create();  // cuDNN itself loads on the first attention call
  return Status::ok();
}

void context_destroy(Context* ctx) {
  if (ctx->stream) cudaStreamSynchronize(ctx->stream);
  cudnn_attention_destroy(ctx->cudnn);
  delete ctx->lt_cache;
  if (ctx->bias_scratch) cudaFree(ctx->bias_scratch);
  if (ctx->scratch) cudaFree(ctx->scratch);
  if (ctx->lt_workspace) cudaFree(ctx->lt_workspace);
  if (ctx->lt) cublasLtDestroy(ctx->lt);
  if (ctx->blas) cublasDestroy(ctx->blas);
  if (ctx->stream) cudaStreamDestroy(ctx->stream);
  *ctx = Context{};
}

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi), as activation.cu

template <typename Act>
__global__ void add_bias_kernel(Act* out, const Act* bias, int N, int OC) {
  const size_t total = static_cast<size_t>(N) * OC;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = from_f32<Act>(to_f32(out[i]) + to_f32(bias[i % OC]));
  }
}

// d = gelu'(pre) * d, in place: the unfused dGELU after a GEMM that wrote d.
template <typename Act>
__global__ void dgelu_inplace_kernel(Act* d, const Act* pre, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = to_f32(pre[i]);
    const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
    const float grad = 0.5f * (1.0f + th) +
                       0.5f * x * (1.0f - th * th) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    d[i] = from_f32<Act>(grad * to_f32(d[i]));
  }
}

__global__ void add_vector_kernel(float* dst, const float* src, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

// The forward GEMM as an LtKey: D^T [OC,N] = (w [C,OC] col-major)^T x inp [C,N].
template <typename Act>
LtKey forward_key(const Act* out, const Act* inp, const Act* w, const Act* bias, const Act* aux,
                  int N, int C, int OC, cublasLtEpilogue_t epi) {
  LtKey k;
  k.m = OC, k.n = N, k.k = C;
  k.lda = C, k.ldb = C, k.ldd = OC;
  k.transa = CUBLAS_OP_T, k.transb = CUBLAS_OP_N;
  k.ab_type = k.d_type = cuda_data_type<Act>();
  k.epilogue = epi;
  k.aux_ld = aux != nullptr ? OC : 0;
  k.align_a = lt_alignment(w), k.align_b = lt_alignment(inp), k.align_d = lt_alignment(out);
  k.align_bias = lt_alignment(bias), k.align_aux = lt_alignment(aux);
  return k;
}

// The previous forward path: one uncached cuBLASLt call with the bias as its epilogue.
template <typename Act>
Status uncached_lt_forward(const Context& ctx, Act* out, const Act* inp, const Act* w,
                           const Act* bias, int N, int C, int OC) {
  LtCache once;
  return once.run(ctx, forward_key(out, inp, w, bias, static_cast<const Act*>(nullptr), N, C, OC,
                                   bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT),
                  LtArgs{w, inp, out, 0.0f, bias, nullptr});
}

template <typename Act>
Status cublas_forward(const Context& ctx, Act* out, const Act* inp, const Act* w, const Act* bias,
                      int N, int C, int OC) {
  constexpr cudaDataType_t type = cuda_data_type<Act>();
  const float one = 1.0f, zero = 0.0f;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(ctx.blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w,
                                               type, C, inp, type, C, &zero, out, type, OC,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bias == nullptr) return Status::ok();
  add_bias_kernel<<<grid_for(static_cast<size_t>(N) * OC, 256), 256, 0, ctx.stream>>>(out, bias, N, OC);
  return launch_status("matmul_forward(bias)");
}

// Status::unavailable from LtCache means "no plan": the caller falls back; anything else is
// a real error.
bool refused(const Status& s) { return s.code() == StatusCode::kUnavailable; }

}  // namespace

template <typename Act>
Status matmul_forward(const Context& ctx, Act* out, const Act* inp, const Act* w,
                      const Act* bias, int N, int C, int OC) {
  const cublasLtEpilogue_t epi = bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  const Status s =
      ctx.opt.lt_cache && ctx.lt_cache != nullptr
          ? ctx.lt_cache->run(ctx, forward_key(out, inp, w, bias, static_cast<const Act*>(nullptr), N, C, OC, epi),
                              LtArgs{w, inp, out, 0.0f, bias, nullptr})
          : uncached_lt_forward(ctx, out, inp, w, bias, N, C, OC);
  if (!refused(s)) return s;
  // cuBLASLt refused this shape or alignment: plain cuBLAS, then the bias as its own pass.
  return cublas_forward(ctx, out, inp, w, bias, N, C, OC);
}

template <typename Act>
Status matmul_forward_gelu(const Context& ctx, Act* out, Act* pre, const Act* inp, const Act* w,
                           const Act* bias, int N, int C, int OC) {
  if (ctx.opt.epilogues && ctx.opt.lt_cache && ctx.lt_cache != nullptr && OC % 8 == 0) {
    const cublasLtEpilogue_t epi = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    const Status s = ctx.lt_cache->run(ctx, forward_key(out, inp, w, bias, pre, N, C, OC, epi),
                                       LtArgs{w, inp, out, 0.0f, bias, pre});
    if (!refused(s)) return s;
  }
  PARTRAIN_RETURN_IF_ERROR(matmul_forward(ctx, pre, inp, w, bias, N, C, OC));
  return gelu_forward(ctx, out, pre, static_cast<size_t>(N) * OC);
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

// dinp^T [C,N] (+)= w [C,OC] x dout^T [OC,N] (column-major views); with gelu_pre the DGELU
// epilogue (overwrite).
template <typename Act>
Status dinp_gemm(const Context& ctx, const LinearGrads<Act>& g, const Act* dout, const Act* w,
                 int N, int C, int OC) {
  constexpr cudaDataType_t type = cuda_data_type<Act>();
  const bool fused_gelu = g.gelu_pre != nullptr && ctx.opt.epilogues && C % 8 == 0;
  const float beta = g.gelu_pre != nullptr || g.dinp_overwrite ? 0.0f : 1.0f;
  const bool use_lt = ctx.opt.lt_cache && ctx.lt_cache != nullptr;
  LtKey k;
  {
    k.m = C, k.n = N, k.k = OC;
    k.lda = C, k.ldb = OC, k.ldd = C;
    k.ab_type = k.d_type = type;
    k.epilogue = fused_gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
    k.aux_ld = fused_gelu ? C : 0;
    k.align_a = lt_alignment(w), k.align_b = lt_alignment(dout), k.align_d = lt_alignment(g.dinp);
    k.align_aux = fused_gelu ? lt_alignment(g.gelu_pre) : 0;
  }
  const Status s = use_lt ? ctx.lt_cache->run(ctx, k, LtArgs{w, dout, g.dinp, beta, nullptr,
                                                            fused_gelu ? g.gelu_pre : nullptr})
                          : Status::unavailable("");
  if (s.is_ok() && fused_gelu) return s;
  if (refused(s)) {
    const float one = 1.0f;
    PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC,
                                                 &one, w, type, C, dout, type, OC, &beta, g.dinp,
                                                 type, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else if (!s) {
    return s;
  }
  if (g.gelu_pre == nullptr) return Status::ok();
  const size_t n = static_cast<size_t>(N) * C;
  dgelu_inplace_kernel<<<grid_for(n, 256), 256, 0, ctx.stream>>>(g.dinp, g.gelu_pre, n);
  return launch_status("matmul_backward(dgelu)");
}

// dw^T [C,OC] (+)= inp^T [C,N] x dout [N,OC]; with dbias and the "epilogue" path the bias
// gradient (BGRADB: sums of dout over N) comes out of the same GEMM. *bias_done says so.
template <typename Act>
Status dw_gemm(const Context& ctx, const LinearGrads<Act>& g, const Act* dout, const Act* inp,
               int N, int C, int OC, bool* bias_done) {
  *bias_done = false;
  constexpr cudaDataType_t type = cuda_data_type<Act>();
  const float beta = g.dw_overwrite ? 0.0f : 1.0f;
  if (ctx.opt.lt_cache && ctx.lt_cache != nullptr) {
    const bool bgrad = g.dbias != nullptr && ctx.opt.epilogues && static_cast<size_t>(OC) <= kBiasScratchFloats;
    LtKey k;
    k.m = C, k.n = OC, k.k = N;
    k.lda = C, k.ldb = OC, k.ldd = C;
    k.transa = CUBLAS_OP_N, k.transb = CUBLAS_OP_T;
    k.ab_type = type, k.d_type = CUDA_R_32F;
    k.align_a = lt_alignment(inp), k.align_b = lt_alignment(dout), k.align_d = lt_alignment(g.dw);
    if (bgrad) {
      k.epilogue = CUBLASLT_EPILOGUE_BGRADB;
      k.align_bias = lt_alignment(ctx.bias_scratch);
      const Status s = ctx.lt_cache->run(ctx, k, LtArgs{inp, dout, g.dw, beta, ctx.bias_scratch, nullptr});
      if (s.is_ok()) {
        add_vector_kernel<<<(OC + 255) / 256, 256, 0, ctx.stream>>>(g.dbias, ctx.bias_scratch, OC);
        *bias_done = true;
        return launch_status("matmul_backward(dbias)");
      }
      if (!refused(s)) return s;
      k.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      k.align_bias = 0;
    }
    const Status s = ctx.lt_cache->run(ctx, k, LtArgs{inp, dout, g.dw, beta, nullptr, nullptr});
    if (!refused(s)) return s;
  }
  const float one = 1.0f;
  return cublas_status(cublasGemmEx(ctx.blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, type,
                                    C, dout, type, OC, &beta, g.dw, CUDA_R_32F, C,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                       "cublasGemmEx(dw)");
}
}  // namespace

template <typename Act>
Status matmul_backward_ex(const Context& ctx, const LinearGrads<Act>& g, const Act* dout,
                          const Act* inp, const Act* w, int N, int C, int OC) {
  if (g.dinp != nullptr) PARTRAIN_RETURN_IF_ERROR(dinp_gemm(ctx, g, dout, w, N, C, OC));
  bool bias_done = false;
  if (g.dw != nullptr) PARTRAIN_RETURN_IF_ERROR(dw_gemm(ctx, g, dout, inp, N, C, OC, &bias_done));
  if (g.dbias != nullptr && !bias_done) {
    PARTRAIN_RETURN_IF_ERROR(
        column_sums<1>(ctx, ColumnOf<Act>{dout, OC}, N, OC, ColumnOutputs<1>{{g.dbias}}));
  }
  return Status::ok();
}

template <typename Act>
Status matmul_backward(const Context& ctx, Act* dinp, float* dw, float* dbias, const Act* dout,
                       const Act* inp, const Act* w, int N, int C, int OC) {
  LinearGrads<Act> g;
  g.dinp = dinp;
  g.dw = dw;
  g.dbias = dbias;
  return matmul_backward_ex(ctx, g, dout, inp, w, N, C, OC);
}

#define PARTRAIN_INSTANTIATE(Act)                                                              \
  template Status matmul_forward<Act>(const Context&, Act*, const Act*, const Act*,            \
                                      const Act*, int, int, int);                              \
  template Status matmul_forward_gelu<Act>(const Context&, Act*, Act*, const Act*, const Act*, \
                                           const Act*, int, int, int);                         \
  template Status matmul_backward<Act>(const Context&, Act*, float*, float*, const Act*,       \
                                       const Act*, const Act*, int, int, int);                 \
  template Status matmul_backward_ex<Act>(const Context&, const LinearGrads<Act>&, const Act*, \
                                          const Act*, const Act*, int, int, int);
PARTRAIN_INSTANTIATE(float)
PARTRAIN_INSTANTIATE(bf16)
#undef PARTRAIN_INSTANTIATE

}  // namespace partrain::engine::cuda
