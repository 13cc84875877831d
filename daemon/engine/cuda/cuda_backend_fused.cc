// CudaBackend's fused ops (engine/backend.h "fused ops"): residual + norm in one pass, GELU in
// the GEMM's epilogue forward and its gradient in the next GEMM's backward, AdamW over every
// tensor of a flat buffer in one launch. Each kernel falls back to the plain path where its
// fast path is off or refuses (KernelOptions), so they compute what the defaults compute.
#include <algorithm>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_backend_ops.h"
#include "engine/cuda/cuda_status.h"

namespace partrain::engine::cuda {

void CudaBackend::residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean,
                                             const Tensor& rstd, const Tensor& a, const Tensor& b,
                                             const Tensor& w, const Tensor& bias, int N, int C, float eps) {
  op_mark("residual_layernorm_forward");
  float *mu = nullptr, *rs = nullptr;
  if (!ok() || !check(same_dtype("residual_layernorm_forward", {&res, &out, &a, &b, &w, &bias})) ||
      !check(f32("residual_layernorm_forward", mean, &mu)) || !check(f32("residual_layernorm_forward", rstd, &rs)))
    return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::residual_layernorm_forward<A>(ctx_, res.ptr<A>(), out.ptr<A>(), mu, rs, a.ptr<A>(), b.ptr<A>(),
                                               w.ptr<A>(), bias.ptr<A>(), N, C, eps);
  }));
}

void CudaBackend::residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd,
                                           const Tensor& a, const Tensor& b, const Tensor& w, int N, int C,
                                           float eps) {
  op_mark("residual_rmsnorm_forward");
  float* rs = nullptr;
  if (!ok() || !check(same_dtype("residual_rmsnorm_forward", {&res, &out, &a, &b, &w})) ||
      !check(f32("residual_rmsnorm_forward", rstd, &rs)))
    return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::residual_rmsnorm_forward<A>(ctx_, res.ptr<A>(), out.ptr<A>(), rs, a.ptr<A>(), b.ptr<A>(),
                                             w.ptr<A>(), N, C, eps);
  }));
}

void CudaBackend::matmul_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& w,
                                      const Tensor& bias, int N, int C, int OC) {
  op_mark("matmul_gelu_forward");
  if (!ok() || !check(same_dtype("matmul_gelu_forward", {&out, &pre, &inp, &w, &bias}))) return;
  check(dispatch(out.dtype, [&](auto t) {
    using A = decltype(t);
    return cuda::matmul_forward_gelu<A>(ctx_, out.ptr<A>(), pre.ptr<A>(), inp.ptr<A>(), w.ptr<A>(), bias.ptr<A>(), N,
                                        C, OC);
  }));
}

void CudaBackend::matmul_gelu_backward(const Tensor& dpre, const Tensor& dw, const Tensor& dbias,
                                       const Tensor& dout, const Tensor& h, const Tensor& w, const Tensor& pre,
                                       const Tensor& /*scratch: the dGELU epilogue or its in-place fallback*/,
                                       int N, int C, int OC) {
  op_mark("matmul_gelu_backward");
  float *gw = nullptr, *gb = nullptr;
  if (!ok() || !check(same_dtype("matmul_gelu_backward", {&dpre, &dout, &h, &w, &pre})) ||
      !check(f32("matmul_gelu_backward", dw, &gw)) || !check(f32("matmul_gelu_backward", dbias, &gb)))
    return;
  check(dispatch(dout.dtype, [&](auto t) {
    using A = decltype(t);
    LinearGrads<A> g;
    g.dinp = dpre.ptr<A>();
    g.gelu_pre = pre.ptr<A>();
    g.dw = gw;
    g.dbias = gb;
    return cuda::matmul_backward_ex<A>(ctx_, g, dout.ptr<A>(), h.ptr<A>(), w.ptr<A>(), N, C, OC);
  }));
}

// The segment table of `ranges` on the device: uploaded once per distinct table (a model's
// optimizer passes the same one or few every step).
Result<const AdamWSegment*> CudaBackend::adamw_segments(const std::vector<AdamWRange>& ranges) {
  std::vector<AdamWSegment> segs;
  segs.reserve(ranges.size());
  for (const AdamWRange& r : ranges) segs.push_back(AdamWSegment{r.begin, r.end, r.weight_decay, 0});
  std::sort(segs.begin(), segs.end(), [](const AdamWSegment& x, const AdamWSegment& y) { return x.begin < y.begin; });
  for (const SegmentTable& t : segment_tables_) {
    if (t.host.size() == segs.size() &&
        std::equal(t.host.begin(), t.host.end(), segs.begin(), [](const AdamWSegment& x, const AdamWSegment& y) {
          return x.begin == y.begin && x.end == y.end && x.weight_decay == y.weight_decay;
        })) {
      return static_cast<const AdamWSegment*>(t.device.data);
    }
  }
  auto dev = alloc(MemCategory::kOptimizer, DType::kI32, Shape{static_cast<int64_t>(segs.size() * sizeof(AdamWSegment) / 4)});
  if (!dev) return dev.status();
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev->data, segs.data(), segs.size() * sizeof(AdamWSegment),
                                                cudaMemcpyHostToDevice, ctx_.stream));
  PARTRAIN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(ctx_.stream));  // segs dies here
  segment_tables_.push_back(SegmentTable{std::move(segs), *dev});
  return static_cast<const AdamWSegment*>(dev->data);
}

void CudaBackend::adamw_multi(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v,
                              const Tensor& grad, const std::vector<AdamWRange>& ranges, const AdamWArgs& a) {
  if (!ctx_.opt.multi_adamw || ranges.empty()) return Backend::adamw_multi(param, master, m, v, grad, ranges, a);
  op_mark("adamw_multi");
  float *pm = nullptr, *mm = nullptr, *vv = nullptr, *g = nullptr;
  if (!ok() || !check(f32("adamw_multi", master, &pm)) || !check(f32("adamw_multi", m, &mm)) ||
      !check(f32("adamw_multi", v, &vv)) || !check(f32("adamw_multi", grad, &g)))
    return;
  const bool f32_param = param.dtype == DType::kF32;
  if (!f32_param && pm == nullptr) {
    check(Status::internal("adamw_multi: a bf16 parameter needs its fp32 master tensor"));
    return;
  }
  Result<const AdamWSegment*> segs = adamw_segments(ranges);
  if (!check(segs.status())) return;
  int64_t end = 0;
  for (const AdamWRange& r : ranges) end = std::max(end, r.end);
  const size_t n = static_cast<size_t>(end);
  const AdamWScalars sc = adamw_scalars(a.lr, a.beta1, a.beta2, a.eps, a.t, a.grad_scale);
  check(cuda::adamw_multi(ctx_, f32_param ? param.ptr<float>() : pm, mm, vv, g, f32_param ? nullptr : param.ptr<bf16>(),
                          n, *segs, static_cast<int>(ranges.size()), sc));
}

}  // namespace partrain::engine::cuda
