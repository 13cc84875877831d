// See cpu_bf16_backend.h.
#include "engine/cpu/cpu_bf16_backend.h"

#include <cstring>
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <vector>

namespace partrain::engine::cpu {

// The bf16 tensors one op touches, widened to fp32 for the op and narrowed back when it
// ends. Views into one allocation share one widened range (the union of theirs), so ops in
// place and slices of a packed buffer see each other's writes.
class F32Scope {
  // Conversions of more elements than this use the OpenMP threads the kernels use.
  static constexpr size_t kParallelFrom = 1 << 14;

 public:
  F32Scope(CpuBf16Backend& be, std::initializer_list<const Tensor*> tensors) {
    for (const Tensor* t : tensors) {
      if (t->dtype != DType::kBF16 || t->data == nullptr) continue;
      const auto [base, bytes] = be.allocation_of(t->data);
      if (base == nullptr) continue;  // not from alloc(): left as it is
      auto* first = static_cast<uint16_t*>(base);
      const size_t size = bytes / sizeof(uint16_t);
      const size_t lo = static_cast<size_t>(static_cast<const uint16_t*>(t->data) - first);
      const size_t hi = std::min(size, lo + static_cast<size_t>(t->numel()));
      Wide* w = find(first);
      if (w == nullptr) {
        wide_.push_back(Wide{first, lo, hi, {}});
      } else {
        w->lo = std::min(w->lo, lo);
        w->hi = std::max(w->hi, hi);
      }
    }
    for (Wide& w : wide_) {
      w.data.resize(w.hi - w.lo);
      const size_t n = w.data.size();
#pragma omp parallel for simd if (n > kParallelFrom)
      for (size_t i = 0; i < n; ++i) w.data[i] = from_bf16(w.base[w.lo + i]);
    }
  }
  ~F32Scope() {
    for (Wide& w : wide_) {
      const size_t n = w.data.size();
#pragma omp parallel for simd if (n > kParallelFrom)
      for (size_t i = 0; i < n; ++i) w.base[w.lo + i] = to_bf16(w.data[i]);
    }
  }
  F32Scope(const F32Scope&) = delete;
  F32Scope& operator=(const F32Scope&) = delete;

  // `t` itself unless it is a bf16 tensor named at construction; else its fp32 copy.
  Tensor view(const Tensor& t) {
    if (t.dtype != DType::kBF16 || t.data == nullptr) return t;
    for (Wide& w : wide_) {
      const auto* p = static_cast<const uint16_t*>(t.data);
      if (p >= w.base + w.lo && p < w.base + w.hi) {
        return Tensor{w.data.data() + (p - w.base - static_cast<std::ptrdiff_t>(w.lo)), DType::kF32, t.shape};
      }
    }
    return t;
  }

 private:
  struct Wide {
    uint16_t* base;  // the allocation
    size_t lo, hi;   // the widened range, in elements
    std::vector<float> data;
  };
  Wide* find(const uint16_t* base) {
    for (Wide& w : wide_) {
      if (w.base == base) return &w;
    }
    return nullptr;
  }
  std::vector<Wide> wide_;
};

void CpuBf16Backend::to_device(const Tensor& dst, const float* src) {
  F32Scope s(*this, {&dst});
  CpuBackend::to_device(s.view(dst), src);
}

void CpuBf16Backend::to_host(float* dst, const Tensor& src) {
  F32Scope s(*this, {&src});
  CpuBackend::to_host(dst, s.view(src));
}

void CpuBf16Backend::copy(const Tensor& dst, const Tensor& src) {
  F32Scope s(*this, {&dst, &src});
  CpuBackend::copy(s.view(dst), s.view(src));
}

void CpuBf16Backend::zero(const Tensor& t) {
  F32Scope s(*this, {&t});
  CpuBackend::zero(s.view(t));
}

void CpuBf16Backend::fill(const Tensor& t, float value) {
  F32Scope s(*this, {&t});
  CpuBackend::fill(s.view(t), value);
}

void CpuBf16Backend::scale(const Tensor& t, float factor) {
  F32Scope s(*this, {&t});
  CpuBackend::scale(s.view(t), factor);
}

void CpuBf16Backend::accumulate(const Tensor& dst, const Tensor& src) {
  F32Scope s(*this, {&dst, &src});
  CpuBackend::accumulate(s.view(dst), s.view(src));
}

void CpuBf16Backend::residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  F32Scope s(*this, {&out, &a, &b});
  CpuBackend::residual_forward(s.view(out), s.view(a), s.view(b));
}

void CpuBf16Backend::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe, int B, int T, int C) {
  F32Scope s(*this, {&out, &tokens, &wte, &wpe});
  CpuBackend::embedding_forward(s.view(out), s.view(tokens), s.view(wte), s.view(wpe), B, T, C);
}

void CpuBf16Backend::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens, int B, int T, int C) {
  F32Scope s(*this, {&dwte, &dwpe, &dout, &tokens});
  CpuBackend::embedding_backward(s.view(dwte), s.view(dwpe), s.view(dout), s.view(tokens), B, T, C);
}

void CpuBf16Backend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& w, const Tensor& b, int N, int C, float eps) {
  F32Scope s(*this, {&out, &mean, &rstd, &inp, &w, &b});
  CpuBackend::layernorm_forward(s.view(out), s.view(mean), s.view(rstd), s.view(inp), s.view(w), s.view(b), N, C, eps);
}

void CpuBf16Backend::layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout, const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd, int N, int C) {
  F32Scope s(*this, {&dinp, &dw, &db, &dout, &inp, &w, &mean, &rstd});
  CpuBackend::layernorm_backward(s.view(dinp), s.view(dw), s.view(db), s.view(dout), s.view(inp), s.view(w), s.view(mean), s.view(rstd), N, C);
}

void CpuBf16Backend::rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w, int N, int C, float eps) {
  F32Scope s(*this, {&out, &rstd, &inp, &w});
  CpuBackend::rmsnorm_forward(s.view(out), s.view(rstd), s.view(inp), s.view(w), N, C, eps);
}

void CpuBf16Backend::rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp, const Tensor& w, const Tensor& rstd, int N, int C) {
  F32Scope s(*this, {&dinp, &dw, &dout, &inp, &w, &rstd});
  CpuBackend::rmsnorm_backward(s.view(dinp), s.view(dw), s.view(dout), s.view(inp), s.view(w), s.view(rstd), N, C);
}

void CpuBf16Backend::matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias, int N, int C, int OC) {
  F32Scope s(*this, {&out, &inp, &w, &bias});
  CpuBackend::matmul_forward(s.view(out), s.view(inp), s.view(w), s.view(bias), N, C, OC);
}

void CpuBf16Backend::matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout, const Tensor& inp, const Tensor& w, int N, int C, int OC) {
  F32Scope s(*this, {&dinp, &dw, &dbias, &dout, &inp, &w});
  CpuBackend::matmul_backward(s.view(dinp), s.view(dw), s.view(dbias), s.view(dout), s.view(inp), s.view(w), N, C, OC);
}

void CpuBf16Backend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& d) {
  F32Scope s(*this, {&out, &lse, &q, &k, &v});
  CpuBackend::attention_forward(s.view(out), s.view(lse), s.view(q), s.view(k), s.view(v), d);
}

void CpuBf16Backend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionDims& d) {
  F32Scope s(*this, {&dq, &dk, &dv, &dout, &out, &lse, &q, &k, &v});
  CpuBackend::attention_backward(s.view(dq), s.view(dk), s.view(dv), s.view(dout), s.view(out), s.view(lse), s.view(q), s.view(k), s.view(v), d);
}

void CpuBf16Backend::gelu_forward(const Tensor& out, const Tensor& inp) {
  F32Scope s(*this, {&out, &inp});
  CpuBackend::gelu_forward(s.view(out), s.view(inp));
}

void CpuBf16Backend::gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  F32Scope s(*this, {&dinp, &inp, &dout});
  CpuBackend::gelu_backward(s.view(dinp), s.view(inp), s.view(dout));
}

void CpuBf16Backend::swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) {
  F32Scope s(*this, {&out, &inp});
  CpuBackend::swiglu_forward(s.view(out), s.view(inp), N, F);
}

void CpuBf16Backend::swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, int N, int F) {
  F32Scope s(*this, {&dinp, &inp, &dout});
  CpuBackend::swiglu_backward(s.view(dinp), s.view(inp), s.view(dout), N, F);
}

void CpuBf16Backend::rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads, int hd, int stride, float theta, const SeqPositions& pos) {
  F32Scope s(*this, {&out, &inp});
  CpuBackend::rope_forward(s.view(out), s.view(inp), B, T, heads, hd, stride, theta, pos);
}

void CpuBf16Backend::rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads, int hd, int stride, float theta, const SeqPositions& pos) {
  F32Scope s(*this, {&dinp, &dout});
  CpuBackend::rope_backward(s.view(dinp), s.view(dout), B, T, heads, hd, stride, theta, pos);
}

void CpuBf16Backend::attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBlockDims& d) {
  F32Scope s(*this, {&out, &lse, &q, &k, &v});
  CpuBackend::attention_block_forward(s.view(out), s.view(lse), s.view(q), s.view(k), s.view(v), d);
}

void CpuBf16Backend::attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionBlockDims& d) {
  F32Scope s(*this, {&dq, &dk, &dv, &dout, &out, &lse, &q, &k, &v});
  CpuBackend::attention_block_backward(s.view(dq), s.view(dk), s.view(dv), s.view(dout), s.view(out), s.view(lse), s.view(q), s.view(k), s.view(v), d);
}

void CpuBf16Backend::copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride, int rows, int cols) {
  F32Scope s(*this, {&dst, &src});
  CpuBackend::copy_columns(s.view(dst), dst_stride, s.view(src), src_stride, rows, cols);
}

void CpuBf16Backend::crossentropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits, const Tensor& targets, int N, int V) {
  F32Scope s(*this, {&losses, &lse, &logits, &targets});
  CpuBackend::crossentropy_forward(s.view(losses), s.view(lse), s.view(logits), s.view(targets), N, V);
}

void CpuBf16Backend::crossentropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets, const Tensor& dloss, int N, int V) {
  F32Scope s(*this, {&dlogits, &logits, &lse, &targets, &dloss});
  CpuBackend::crossentropy_backward(s.view(dlogits), s.view(logits), s.view(lse), s.view(targets), s.view(dloss), N, V);
}

void CpuBf16Backend::dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed, uint64_t offset) {
  F32Scope s(*this, {&out, &inp});
  CpuBackend::dropout_forward(s.view(out), s.view(inp), p, seed, offset);
}

void CpuBf16Backend::dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed, uint64_t offset) {
  F32Scope s(*this, {&dinp, &dout});
  CpuBackend::dropout_backward(s.view(dinp), s.view(dout), p, seed, offset);
}

void CpuBf16Backend::gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight, int M, int C) {
  F32Scope s(*this, {&out, &inp, &idx, &weight});
  CpuBackend::gather_rows(s.view(out), s.view(inp), s.view(idx), s.view(weight), M, C);
}

void CpuBf16Backend::scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight, int M, int C) {
  F32Scope s(*this, {&out, &inp, &idx, &weight});
  CpuBackend::scatter_add_rows(s.view(out), s.view(inp), s.view(idx), s.view(weight), M, C);
}

void CpuBf16Backend::gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx, const Tensor& b, int M, int C) {
  F32Scope s(*this, {&out, &a, &idx, &b});
  CpuBackend::gathered_row_dot(s.view(out), s.view(a), s.view(idx), s.view(b), M, C);
}

double CpuBf16Backend::sum_squares(const Tensor& x) {
  F32Scope s(*this, {&x});
  return CpuBackend::sum_squares(s.view(x));
}


void CpuBf16Backend::adamw(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v,
                           const Tensor& grad, const AdamWArgs& a) {
  CpuBackend::adamw(master, Tensor{}, m, v, grad, a);
  F32Scope s(*this, {&param});
  std::memcpy(s.view(param).data, master.data, master.bytes());
}

}  // namespace partrain::engine::cpu

namespace partrain::engine {
std::unique_ptr<Backend> make_cpu_bf16_backend() { return std::make_unique<cpu::CpuBf16Backend>(); }
}  // namespace partrain::engine
