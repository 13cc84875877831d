// LtCache: see blaslt.h.
#include "engine/cuda/blaslt.h"

#include <string>

#include "engine/cuda/cuda_status.h"
#include "engine/cuda/kernels.h"

namespace partrain::engine::cuda {

bool LtKey::operator==(const LtKey& o) const {
  return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldd == o.ldd &&
         transa == o.transa && transb == o.transb && ab_type == o.ab_type && d_type == o.d_type &&
         epilogue == o.epilogue && aux_ld == o.aux_ld && align_a == o.align_a &&
         align_b == o.align_b && align_d == o.align_d && align_bias == o.align_bias &&
         align_aux == o.align_aux;
}

uint32_t lt_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

struct LtCache::Entry {
  LtKey key;
  bool ok = false;  // false: cuBLASLt refused the key (no algorithm)
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Entry() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtCache::LtCache() = default;
LtCache::~LtCache() = default;

namespace {

bool uses_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_BGRADA ||
         e == CUBLASLT_EPILOGUE_BGRADB || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool uses_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

template <typename T>
Status set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v, const char* what) {
  return cublas_status(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), what);
}
template <typename T>
Status set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& v) {
  return cublas_status(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)),
                       "cublasLtMatmulPreferenceSetAttribute");
}

// Rows and columns of a stored (column-major) operand op(X)[r,c] with op = trans.
void stored_shape(cublasOperation_t trans, int r, int c, uint64_t* rows, uint64_t* cols) {
  *rows = static_cast<uint64_t>(trans == CUBLAS_OP_N ? r : c);
  *cols = static_cast<uint64_t>(trans == CUBLAS_OP_N ? c : r);
}

// The descriptors and the first algorithm of the heuristic for `key`.
Status build(const Context& ctx, const LtKey& key, const LtArgs& args, cublasLtMatmulDesc_t* op,
             cublasLtMatrixLayout_t* la, cublasLtMatrixLayout_t* lb, cublasLtMatrixLayout_t* ld,
             cublasLtMatmulAlgo_t* algo, bool* found) {
  *found = false;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  PARTRAIN_RETURN_IF_ERROR(set_desc(*op, CUBLASLT_MATMUL_DESC_TRANSA, key.transa, "TRANSA"));
  PARTRAIN_RETURN_IF_ERROR(set_desc(*op, CUBLASLT_MATMUL_DESC_TRANSB, key.transb, "TRANSB"));
  if (key.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    PARTRAIN_RETURN_IF_ERROR(set_desc(*op, CUBLASLT_MATMUL_DESC_EPILOGUE, key.epilogue, "EPILOGUE"));
  }
  if (uses_bias(key.epilogue)) {
    PARTRAIN_RETURN_IF_ERROR(set_desc(*op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias, "BIAS_POINTER"));
  }
  if (uses_aux(key.epilogue)) {
    PARTRAIN_RETURN_IF_ERROR(set_desc(*op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux, "AUX_POINTER"));
    PARTRAIN_RETURN_IF_ERROR(set_desc(*op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.aux_ld, "AUX_LD"));
  }
  uint64_t r = 0, c = 0;
  stored_shape(key.transa, key.m, key.k, &r, &c);
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(la, key.ab_type, r, c, key.lda));
  stored_shape(key.transb, key.k, key.n, &r, &c);
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(lb, key.ab_type, r, c, key.ldb));
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(
      ld, key.d_type, static_cast<uint64_t>(key.m), static_cast<uint64_t>(key.n), key.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  PARTRAIN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  Status s = set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ctx.lt_workspace_bytes);
  if (s) s = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
  if (s) s = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
  if (s) s = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
  if (s) s = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int count = 0;
  if (s) {
    // A refusal shows as NOT_SUPPORTED or as zero results; either means "no plan".
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx.lt, *op, *la, *lb, *ld, *ld, pref, 1,
                                                             &heuristic, &count);
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) {
      s = cublas_status(hs, "cublasLtMatmulAlgoGetHeuristic");
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (!s) return s;
  if (count > 0 && heuristic.state == CUBLAS_STATUS_SUCCESS) {
    *algo = heuristic.algo;
    *found = true;
  }
  return Status::ok();
}

}  // namespace

LtCache::Entry* LtCache::find_or_build(const Context& ctx, const LtKey& key, const LtArgs& args) {
  for (auto& e : entries_) {
    if (e->key == key) {
      ++stats_.hits;
      return e.get();
    }
  }
  auto e = std::make_unique<Entry>();
  e->key = key;
  bool found = false;
  const Status s = build(ctx, key, args, &e->op, &e->a, &e->b, &e->d, &e->algo, &found);
  e->ok = s.is_ok() && found;
  entries_.push_back(std::move(e));
  return entries_.back().get();
}

Status LtCache::run(const Context& ctx, const LtKey& key, const LtArgs& args) {
  ++stats_.calls;
  Entry* e = find_or_build(ctx, key, args);
  if (!e->ok) {
    ++stats_.refused;
    return Status::unavailable("cuBLASLt has no algorithm for m=" + std::to_string(key.m) +
                               " n=" + std::to_string(key.n) + " k=" + std::to_string(key.k));
  }
  if (uses_bias(key.epilogue)) {
    PARTRAIN_RETURN_IF_ERROR(set_desc(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias, "BIAS_POINTER"));
  }
  if (uses_aux(key.epilogue)) {
    PARTRAIN_RETURN_IF_ERROR(set_desc(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux, "AUX_POINTER"));
  }
  const float alpha = 1.0f;
  return cublas_status(cublasLtMatmul(ctx.lt, e->op, &alpha, args.a, e->a, args.b, e->b, &args.beta,
                                      args.d, e->d, args.d, e->d, &e->algo, ctx.lt_workspace,
                                      ctx.lt_workspace_bytes, ctx.stream),
                       "cublasLtMatmul");
}

}  // namespace partrain::engine::cuda
