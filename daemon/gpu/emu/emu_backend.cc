// See emu_backend.h. Each op: the CUDA backend's dtype rule, the translation of its
// tensors, then the CPU kernel on the backing.
#include "gpu/emu/emu_backend.h"

#include <fmt/format.h>

#include "common/log.h"
#include "gpu/emu/device_arena.h"

namespace partrain::gpu::emu {
namespace {

using engine::MemCategory;
using engine::Shape;

// Non-empty tensors of one op share one dtype (the CUDA backend's same_dtype).
Status same(std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (t->empty()) continue;
    if (first == nullptr) {
      first = t;
    } else if (t->dtype != first->dtype) {
      return Status::internal(fmt::format("mixes {} and {} tensors", dtype_name(first->dtype), dtype_name(t->dtype)));
    }
  }
  return Status::ok();
}

// Non-empty tensors are fp32 (statistics, weight gradients, master weights).
Status f32(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->empty() && t->dtype != DType::kF32) {
      return Status::internal(fmt::format("wants an f32 tensor, got {}", dtype_name(t->dtype)));
    }
  }
  return Status::ok();
}

// Float dtypes only (the CUDA backend's dispatch).
Status floats(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->empty() && t->dtype == DType::kI32) return Status::internal("does not take dtype i32");
  }
  return Status::ok();
}

// i32 (tokens, targets, indices).
Status i32(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->empty() && t->dtype != DType::kI32) {
      return Status::internal(fmt::format("wants an i32 tensor, got {}", dtype_name(t->dtype)));
    }
  }
  return Status::ok();
}

// A strided view (`rows` of `width` elements, `stride` apart: q, k and v inside a packed
// buffer) as the dense span it touches, for translation; with_shape gives the result back
// the view's own shape.
Tensor strided(const Tensor& t, int64_t rows, int64_t stride, int64_t width) {
  return Tensor{t.data, t.dtype, Shape{rows > 0 ? (rows - 1) * stride + width : 0}};
}
Tensor with_shape(Tensor t, const Tensor& like) {
  t.shape = like.shape;
  return t;
}

Status all(std::initializer_list<Status> rules) {
  for (const Status& s : rules) PARTRAIN_RETURN_IF_ERROR(s);
  return Status::ok();
}

}  // namespace

EmuBackend::EmuBackend(int ordinal, DType storage)
    : ordinal_(ordinal), storage_(storage),
      inner_(storage == DType::kBF16 ? engine::make_cpu_bf16_backend() : engine::make_cpu_backend()) {}

EmuBackend::~EmuBackend() { release_all(); }

void* EmuBackend::raw_alloc_typed(size_t bytes, DType dtype) {
  Result<Tensor> backing =
      inner_->alloc(MemCategory::kWorkspace, dtype, Shape{static_cast<int64_t>(bytes / dtype_size(dtype))});
  if (!backing) return nullptr;
  void* dev = DeviceArena::get().map(backing->data, bytes, dtype);
  if (dev == nullptr) inner_->release(&*backing);
  return dev;
}

void EmuBackend::raw_free(void* p) {
  Tensor backing{DeviceArena::get().unmap(p), DType::kF32, Shape{}};
  inner_->release(&backing);
}

bool EmuBackend::keep(Status s) {
  if (s.is_ok()) return true;
  if (error_.is_ok()) {
    error_ = std::move(s);
    log::error("engine", "{}", error_.message());
  }
  return false;
}

bool EmuBackend::run(const char* op, const Status& rule, std::initializer_list<Arg> args) {
  if (!error_.is_ok()) return false;
  if (!rule.is_ok()) return keep(Status::internal(fmt::format("{}: {}: {}", name(), op, rule.message())));
  for (const Arg& a : args) {
    if (a.first->empty()) {
      *a.second = *a.first;
      continue;
    }
    Result<void*> host = DeviceArena::get().host_of(a.first->data, a.first->bytes(), a.first->dtype,
                                                    fmt::format("{}: {}", name(), op));
    if (!host) return keep(host.status());
    *a.second = Tensor{*host, a.first->dtype, a.first->shape};
  }
  return true;
}

// ---- host <-> device ------------------------------------------------------------------------

void EmuBackend::to_device(const Tensor& dst, const float* src) {
  Tensor d;
  if (run("to_device", dst.dtype == DType::kI32 ? Status::internal("an i32 tensor takes to_device_i32") : Status::ok(),
          {{&dst, &d}})) {
    inner_->to_device(d, src);
  }
}
void EmuBackend::to_device_i32(const Tensor& dst, const int32_t* src) {
  Tensor d;
  if (run("to_device_i32", i32({&dst}), {{&dst, &d}})) inner_->to_device_i32(d, src);
}
void EmuBackend::to_host(float* dst, const Tensor& src) {
  Tensor s;
  if (run("to_host", src.dtype == DType::kI32 ? Status::internal("an i32 tensor takes to_host_i32") : Status::ok(),
          {{&src, &s}})) {
    inner_->to_host(dst, s);
  }
}
void EmuBackend::to_host_i32(int32_t* dst, const Tensor& src) {
  Tensor s;
  if (run("to_host_i32", i32({&src}), {{&src, &s}})) inner_->to_host_i32(dst, s);
}
void EmuBackend::copy(const Tensor& dst, const Tensor& src) {
  Tensor d, s;
  const Status rule = dst.dtype == src.dtype ? Status::ok() : floats({&dst, &src});
  if (run("copy", rule, {{&dst, &d}, {&src, &s}})) inner_->copy(d, s);
}

// ---- elementwise ------------------------------------------------------------------------------

void EmuBackend::zero(const Tensor& t) {
  Tensor h;
  if (run("zero", Status::ok(), {{&t, &h}})) inner_->zero(h);
}
void EmuBackend::fill(const Tensor& t, float value) {
  Tensor h;
  if (run("fill", floats({&t}), {{&t, &h}})) inner_->fill(h, value);
}
void EmuBackend::scale(const Tensor& t, float factor) {
  Tensor h;
  if (run("scale", floats({&t}), {{&t, &h}})) inner_->scale(h, factor);
}
void EmuBackend::accumulate(const Tensor& dst, const Tensor& src) {
  Tensor d, s;
  if (run("accumulate", floats({&dst, &src}), {{&dst, &d}, {&src, &s}})) inner_->accumulate(d, s);
}
void EmuBackend::residual_forward(const Tensor& out, const Tensor& a, const Tensor& b) {
  Tensor o, x, y;
  if (run("residual_forward", all({same({&out, &a, &b}), floats({&out})}), {{&out, &o}, {&a, &x}, {&b, &y}})) {
    inner_->residual_forward(o, x, y);
  }
}

// ---- layers -----------------------------------------------------------------------------------

void EmuBackend::embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                   int B, int T, int C) {
  Tensor o, tk, te, pe;
  if (run("embedding_forward", all({same({&out, &wte, &wpe}), i32({&tokens})}),
          {{&out, &o}, {&tokens, &tk}, {&wte, &te}, {&wpe, &pe}})) {
    inner_->embedding_forward(o, tk, te, pe, B, T, C);
  }
}
void EmuBackend::embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                    int B, int T, int C) {
  Tensor dte, dpe, d, tk;
  if (run("embedding_backward", all({f32({&dwte, &dwpe}), i32({&tokens})}),
          {{&dwte, &dte}, {&dwpe, &dpe}, {&dout, &d}, {&tokens, &tk}})) {
    inner_->embedding_backward(dte, dpe, d, tk, B, T, C);
  }
}
void EmuBackend::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                                   const Tensor& w, const Tensor& b, int N, int C, float eps) {
  Tensor o, mu, rs, in, ww, bb;
  if (run("layernorm_forward", all({same({&out, &inp, &w, &b}), f32({&mean, &rstd})}),
          {{&out, &o}, {&mean, &mu}, {&rstd, &rs}, {&inp, &in}, {&w, &ww}, {&b, &bb}})) {
    inner_->layernorm_forward(o, mu, rs, in, ww, bb, N, C, eps);
  }
}
void EmuBackend::layernorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& db, const Tensor& dout,
                                    const Tensor& inp, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                                    int N, int C) {
  Tensor di, gw, gb, d, in, ww, mu, rs;
  if (run("layernorm_backward", all({same({&dinp, &dout, &inp, &w}), f32({&dw, &db, &mean, &rstd})}),
          {{&dinp, &di}, {&dw, &gw}, {&db, &gb}, {&dout, &d}, {&inp, &in}, {&w, &ww}, {&mean, &mu}, {&rstd, &rs}})) {
    inner_->layernorm_backward(di, gw, gb, d, in, ww, mu, rs, N, C);
  }
}
void EmuBackend::rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& w, int N,
                                 int C, float eps) {
  Tensor o, rs, in, ww;
  if (run("rmsnorm_forward", all({same({&out, &inp, &w}), f32({&rstd})}),
          {{&out, &o}, {&rstd, &rs}, {&inp, &in}, {&w, &ww}})) {
    inner_->rmsnorm_forward(o, rs, in, ww, N, C, eps);
  }
}
void EmuBackend::rmsnorm_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dout, const Tensor& inp,
                                  const Tensor& w, const Tensor& rstd, int N, int C) {
  Tensor di, gw, d, in, ww, rs;
  if (run("rmsnorm_backward", all({same({&dinp, &dout, &inp, &w}), f32({&dw, &rstd})}),
          {{&dinp, &di}, {&dw, &gw}, {&dout, &d}, {&inp, &in}, {&w, &ww}, {&rstd, &rs}})) {
    inner_->rmsnorm_backward(di, gw, d, in, ww, rs, N, C);
  }
}
void EmuBackend::matmul_forward(const Tensor& out, const Tensor& inp, const Tensor& w, const Tensor& bias, int N,
                                int C, int OC) {
  Tensor o, in, ww, b;
  if (run("matmul_forward", all({same({&out, &inp, &w, &bias}), floats({&out})}),
          {{&out, &o}, {&inp, &in}, {&w, &ww}, {&bias, &b}})) {
    inner_->matmul_forward(o, in, ww, b, N, C, OC);
  }
}
void EmuBackend::matmul_backward(const Tensor& dinp, const Tensor& dw, const Tensor& dbias, const Tensor& dout,
                                 const Tensor& inp, const Tensor& w, int N, int C, int OC) {
  Tensor di, gw, gb, d, in, ww;
  if (run("matmul_backward", all({same({&dinp, &dout, &inp, &w}), f32({&dw, &dbias})}),
          {{&dinp, &di}, {&dw, &gw}, {&dbias, &gb}, {&dout, &d}, {&inp, &in}, {&w, &ww}})) {
    inner_->matmul_backward(di, gw, gb, d, in, ww, N, C, OC);
  }
}
void EmuBackend::attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const AttentionDims& dims) {
  const int64_t N = static_cast<int64_t>(dims.B) * dims.T;
  const Tensor sq = strided(q, N, dims.q_stride, int64_t{dims.H} * dims.hd);
  const Tensor sk = strided(k, N, dims.kv_stride, int64_t{dims.KV} * dims.hd);
  const Tensor sv = strided(v, N, dims.kv_stride, int64_t{dims.KV} * dims.hd);
  Tensor o, l, qq, kk, vv;
  if (run("attention_forward", all({same({&out, &q, &k, &v}), f32({&lse})}),
          {{&out, &o}, {&lse, &l}, {&sq, &qq}, {&sk, &kk}, {&sv, &vv}})) {
    inner_->attention_forward(o, l, with_shape(qq, q), with_shape(kk, k), with_shape(vv, v), dims);
  }
}
void EmuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                    const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const AttentionDims& dims) {
  const int64_t N = static_cast<int64_t>(dims.B) * dims.T;
  const int64_t wq = int64_t{dims.H} * dims.hd, wkv = int64_t{dims.KV} * dims.hd;
  const Tensor sdq = strided(dq, N, dims.q_stride, wq), sdk = strided(dk, N, dims.kv_stride, wkv),
               sdv = strided(dv, N, dims.kv_stride, wkv), sq = strided(q, N, dims.q_stride, wq),
               sk = strided(k, N, dims.kv_stride, wkv), sv = strided(v, N, dims.kv_stride, wkv);
  Tensor gq, gk, gv, d, o, l, qq, kk, vv;
  if (run("attention_backward", all({same({&dq, &dk, &dv, &dout, &out, &q, &k, &v}), f32({&lse})}),
          {{&sdq, &gq}, {&sdk, &gk}, {&sdv, &gv}, {&dout, &d}, {&out, &o}, {&lse, &l}, {&sq, &qq}, {&sk, &kk},
           {&sv, &vv}})) {
    inner_->attention_backward(with_shape(gq, dq), with_shape(gk, dk), with_shape(gv, dv), d, o, l,
                               with_shape(qq, q), with_shape(kk, k), with_shape(vv, v), dims);
  }
}
void EmuBackend::gelu_forward(const Tensor& out, const Tensor& inp) {
  Tensor o, in;
  if (run("gelu_forward", all({same({&out, &inp}), floats({&out})}), {{&out, &o}, {&inp, &in}})) {
    inner_->gelu_forward(o, in);
  }
}
void EmuBackend::gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) {
  Tensor di, in, d;
  if (run("gelu_backward", all({same({&dinp, &inp, &dout}), floats({&dinp})}),
          {{&dinp, &di}, {&inp, &in}, {&dout, &d}})) {
    inner_->gelu_backward(di, in, d);
  }
}
void EmuBackend::swiglu_forward(const Tensor& out, const Tensor& inp, int N, int F) {
  Tensor o, in;
  if (run("swiglu_forward", all({same({&out, &inp}), floats({&out})}), {{&out, &o}, {&inp, &in}})) {
    inner_->swiglu_forward(o, in, N, F);
  }
}
void EmuBackend::swiglu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout, int N, int F) {
  Tensor di, in, d;
  if (run("swiglu_backward", all({same({&dinp, &inp, &dout}), floats({&dinp})}),
          {{&dinp, &di}, {&inp, &in}, {&dout, &d}})) {
    inner_->swiglu_backward(di, in, d, N, F);
  }
}
void EmuBackend::rope_forward(const Tensor& out, const Tensor& inp, int B, int T, int heads, int hd, int stride,
                              float theta, const SeqPositions& pos) {
  const Tensor so = strided(out, int64_t{B} * T, stride, int64_t{heads} * hd);
  const Tensor si = strided(inp, int64_t{B} * T, stride, int64_t{heads} * hd);
  Tensor o, in;
  if (run("rope_forward", all({same({&out, &inp}), floats({&out})}), {{&so, &o}, {&si, &in}})) {
    inner_->rope_forward(with_shape(o, out), with_shape(in, inp), B, T, heads, hd, stride, theta, pos);
  }
}
void EmuBackend::rope_backward(const Tensor& dinp, const Tensor& dout, int B, int T, int heads, int hd, int stride,
                               float theta, const SeqPositions& pos) {
  const Tensor si = strided(dinp, int64_t{B} * T, stride, int64_t{heads} * hd);
  const Tensor so = strided(dout, int64_t{B} * T, stride, int64_t{heads} * hd);
  Tensor di, d;
  if (run("rope_backward", all({same({&dinp, &dout}), floats({&dinp})}), {{&si, &di}, {&so, &d}})) {
    inner_->rope_backward(with_shape(di, dinp), with_shape(d, dout), B, T, heads, hd, stride, theta, pos);
  }
}
void EmuBackend::attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const AttentionBlockDims& dims) {
  const int64_t Nq = static_cast<int64_t>(dims.B) * dims.Tq, Nk = static_cast<int64_t>(dims.B) * dims.Tk;
  const Tensor sq = strided(q, Nq, dims.q_stride, int64_t{dims.H} * dims.hd);
  const Tensor sk = strided(k, Nk, dims.kv_stride, int64_t{dims.KV} * dims.hd);
  const Tensor sv = strided(v, Nk, dims.kv_stride, int64_t{dims.KV} * dims.hd);
  Tensor o, l, qq, kk, vv;
  if (run("attention_block_forward", all({same({&out, &q, &k, &v}), f32({&lse})}),
          {{&out, &o}, {&lse, &l}, {&sq, &qq}, {&sk, &kk}, {&sv, &vv}})) {
    inner_->attention_block_forward(o, l, with_shape(qq, q), with_shape(kk, k), with_shape(vv, v), dims);
  }
}
void EmuBackend::attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                          const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const AttentionBlockDims& dims) {
  const int64_t Nq = static_cast<int64_t>(dims.B) * dims.Tq, Nk = static_cast<int64_t>(dims.B) * dims.Tk;
  const int64_t wq = int64_t{dims.H} * dims.hd, wkv = int64_t{dims.KV} * dims.hd;
  const Tensor sdq = strided(dq, Nq, dims.q_stride, wq), sdk = strided(dk, Nk, dims.kv_stride, wkv),
               sdv = strided(dv, Nk, dims.kv_stride, wkv), sq = strided(q, Nq, dims.q_stride, wq),
               sk = strided(k, Nk, dims.kv_stride, wkv), sv = strided(v, Nk, dims.kv_stride, wkv);
  Tensor gq, gk, gv, d, o, l, qq, kk, vv;
  if (run("attention_block_backward", all({same({&dq, &dk, &dv, &dout, &out, &q, &k, &v}), f32({&lse})}),
          {{&sdq, &gq}, {&sdk, &gk}, {&sdv, &gv}, {&dout, &d}, {&out, &o}, {&lse, &l}, {&sq, &qq}, {&sk, &kk},
           {&sv, &vv}})) {
    inner_->attention_block_backward(with_shape(gq, dq), with_shape(gk, dk), with_shape(gv, dv), d, o, l,
                                     with_shape(qq, q), with_shape(kk, k), with_shape(vv, v), dims);
  }
}
// copy_columns reads and writes row strides beyond numel(): the whole strided spans.
void EmuBackend::copy_columns(const Tensor& dst, int dst_stride, const Tensor& src, int src_stride, int rows,
                              int cols) {
  const auto span = [&](const Tensor& t, int stride) {
    return Tensor{t.data, t.dtype, Shape{rows > 0 ? static_cast<int64_t>(rows - 1) * stride + cols : 0}};
  };
  const Tensor dspan = span(dst, dst_stride), sspan = span(src, src_stride);
  Tensor d, s;
  const Status rule = dst.dtype == src.dtype ? Status::ok() : Status::internal("copy_columns needs one dtype");
  if (run("copy_columns", rule, {{&dspan, &d}, {&sspan, &s}})) {
    inner_->copy_columns(d, dst_stride, s, src_stride, rows, cols);
  }
}
void EmuBackend::crossentropy_forward(const Tensor& losses, const Tensor& lse, const Tensor& logits,
                                      const Tensor& targets, int N, int V) {
  Tensor lo, l, lg, tg;
  if (run("crossentropy_forward", all({f32({&losses, &lse}), floats({&logits}), i32({&targets})}),
          {{&losses, &lo}, {&lse, &l}, {&logits, &lg}, {&targets, &tg}})) {
    inner_->crossentropy_forward(lo, l, lg, tg, N, V);
  }
}
void EmuBackend::crossentropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse,
                                       const Tensor& targets, const Tensor& dloss, int N, int V) {
  Tensor dl, lg, l, tg, d;
  if (run("crossentropy_backward", all({same({&dlogits, &logits}), f32({&lse, &dloss}), i32({&targets})}),
          {{&dlogits, &dl}, {&logits, &lg}, {&lse, &l}, {&targets, &tg}, {&dloss, &d}})) {
    inner_->crossentropy_backward(dl, lg, l, tg, d, N, V);
  }
}
void EmuBackend::dropout_forward(const Tensor& out, const Tensor& inp, float p, uint64_t seed, uint64_t offset) {
  Tensor o, in;
  if (run("dropout_forward", all({same({&out, &inp}), floats({&out})}), {{&out, &o}, {&inp, &in}})) {
    inner_->dropout_forward(o, in, p, seed, offset);
  }
}
void EmuBackend::dropout_backward(const Tensor& dinp, const Tensor& dout, float p, uint64_t seed, uint64_t offset) {
  Tensor di, d;
  if (run("dropout_backward", all({same({&dinp, &dout}), floats({&dinp})}), {{&dinp, &di}, {&dout, &d}})) {
    inner_->dropout_backward(di, d, p, seed, offset);
  }
}

// ---- mixture-of-experts rows -----------------------------------------------------------------

void EmuBackend::gather_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight, int M,
                             int C) {
  Tensor o, in, ix, w;
  if (run("gather_rows", all({same({&out, &inp}), f32({&weight}), i32({&idx})}),
          {{&out, &o}, {&inp, &in}, {&idx, &ix}, {&weight, &w}})) {
    inner_->gather_rows(o, in, ix, w, M, C);
  }
}
void EmuBackend::scatter_add_rows(const Tensor& out, const Tensor& inp, const Tensor& idx, const Tensor& weight,
                                  int M, int C) {
  Tensor o, in, ix, w;
  if (run("scatter_add_rows", all({same({&out, &inp}), f32({&weight}), i32({&idx})}),
          {{&out, &o}, {&inp, &in}, {&idx, &ix}, {&weight, &w}})) {
    inner_->scatter_add_rows(o, in, ix, w, M, C);
  }
}
void EmuBackend::gathered_row_dot(const Tensor& out, const Tensor& a, const Tensor& idx, const Tensor& b, int M,
                                  int C) {
  Tensor o, x, ix, y;
  if (run("gathered_row_dot", all({same({&a, &b}), f32({&out}), i32({&idx})}),
          {{&out, &o}, {&a, &x}, {&idx, &ix}, {&b, &y}})) {
    inner_->gathered_row_dot(o, x, ix, y, M, C);
  }
}

// ---- optimizer --------------------------------------------------------------------------------

double EmuBackend::sum_squares(const Tensor& x) {
  Tensor h;
  if (!run("sum_squares", floats({&x}), {{&x, &h}})) return 0.0;
  return inner_->sum_squares(h);
}
void EmuBackend::adamw(const Tensor& param, const Tensor& master, const Tensor& m, const Tensor& v, const Tensor& grad,
                       const AdamWArgs& a) {
  Status rule = all({f32({&master, &m, &v, &grad}), floats({&param})});
  if (rule.is_ok() && param.dtype != DType::kF32 && master.empty()) {
    rule = Status::internal("a bf16 parameter needs its fp32 master tensor");
  }
  Tensor p, pm, mm, vv, g;
  if (run("adamw", rule, {{&param, &p}, {&master, &pm}, {&m, &mm}, {&v, &vv}, {&grad, &g}})) {
    inner_->adamw(p, pm, mm, vv, g, a);
  }
}

}  // namespace partrain::gpu::emu
