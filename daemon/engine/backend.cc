// Allocation bookkeeping shared by every backend (the base class's non-virtual part).
#include "engine/backend.h"

#include <fmt/format.h>

namespace partrain::engine {

Result<Tensor> Backend::alloc(MemCategory category, DType dtype, Shape shape) {
  Tensor t{nullptr, dtype, shape};
  const size_t bytes = t.bytes();
  if (bytes == 0) return t;
  t.data = raw_alloc_typed(bytes, dtype);
  if (t.data == nullptr) {
    // The same job on the same layout fails the same way after a restart: a configuration
    // error (exit 2, never requeued), not a retryable one.
    return Status::invalid(fmt::format(
        "{}: the model does not fit: allocating {:.1f} MiB of {} failed with {:.1f} MiB in use; "
        "`partrain plan JOB --partrain=SPEC` shows the memory of each layout (use a smaller micro_batch, "
        "seq_len or model, activation recompute, ZeRO, or more tp/pp ranks)",
        name(), static_cast<double>(bytes) / (1 << 20), mem_category_name(category),
        static_cast<double>(stats_.live_total) / (1 << 20)));
  }
  const auto c = static_cast<size_t>(category);
  live_[t.data] = {category, bytes};
  stats_.live[c] += bytes;
  stats_.live_total += bytes;
  if (stats_.live[c] > stats_.peak[c]) stats_.peak[c] = stats_.live[c];
  if (stats_.live_total > stats_.peak_total) stats_.peak_total = stats_.live_total;
  return t;
}

void Backend::release(Tensor* t) {
  if (t == nullptr || t->data == nullptr) return;
  auto it = live_.find(t->data);
  if (it != live_.end()) {
    const auto c = static_cast<size_t>(it->second.first);
    stats_.live[c] -= it->second.second;
    stats_.live_total -= it->second.second;
    live_.erase(it);
    raw_free(t->data);
  }
  *t = Tensor{};
}

std::pair<void*, size_t> Backend::allocation_of(const void* p) const {
  const char* c = static_cast<const char*>(p);
  for (const auto& [base, info] : live_) {
    const char* b = static_cast<const char*>(base);
    if (c >= b && c < b + info.second) return {base, info.second};
  }
  return {nullptr, 0};
}

void Backend::release_all() {
  for (auto& [p, info] : live_) {
    stats_.live[static_cast<size_t>(info.first)] -= info.second;
    stats_.live_total -= info.second;
    raw_free(p);
  }
  live_.clear();
}

// ---- fused ops: the plain ops in sequence --------------------------------------------------

void Backend::residual_layernorm_forward(const Tensor& res, const Tensor& out, const Tensor& mean,
                                         const Tensor& rstd, const Tensor& a, const Tensor& b, const Tensor& w,
                                         const Tensor& bias, int N, int C, float eps) {
  residual_forward(res, a, b);
  layernorm_forward(out, mean, rstd, res, w, bias, N, C, eps);
}

void Backend::residual_rmsnorm_forward(const Tensor& res, const Tensor& out, const Tensor& rstd,
                                       const Tensor& a, const Tensor& b, const Tensor& w, int N, int C, float eps) {
  residual_forward(res, a, b);
  rmsnorm_forward(out, rstd, res, w, N, C, eps);
}

void Backend::matmul_gelu_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& w,
                                  const Tensor& bias, int N, int C, int OC) {
  matmul_forward(pre, inp, w, bias, N, C, OC);
  gelu_forward(out, pre);
}

void Backend::matmul_gelu_backward(const Tensor& dpre, const Tensor& dw, const Tensor& dbias,
                                   const Tensor& dout, const Tensor& h, const Tensor& w, const Tensor& pre,
                                   const Tensor& scratch, int N, int C, int OC) {
  zero(scratch);
  matmul_backward(scratch, dw, dbias, dout, h, w, N, C, OC);
  zero(dpre);
  gelu_backward(dpre, pre, scratch);
}

void Backend::adamw_multi(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v,
                          const Tensor& grad, const std::vector<AdamWRange>& ranges, const AdamWArgs& a) {
  for (const AdamWRange& r : ranges) {
    AdamWArgs ar = a;
    ar.weight_decay = r.weight_decay;
    const Shape piece{r.end - r.begin};
    adamw(param.slice(r.begin, piece), master.empty() ? Tensor{} : master.slice(r.begin, piece),
          m.slice(r.begin, piece), v.slice(r.begin, piece), grad.slice(r.begin, piece), ar);
  }
}

}  // namespace partrain::engine
