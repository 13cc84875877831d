// CudnnLib, CudnnDesc, CudnnGraph: see cudnn_graph.h.
#include "engine/cuda/cudnn_graph.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace partrain::engine::cuda {
namespace {

#ifndef PARTRAIN_CUDNN_LIBRARY_HINT
#define PARTRAIN_CUDNN_LIBRARY_HINT ""
#endif

struct Loaded {
  CudnnLib lib;
  Status status;
};

const char* status_name(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return nullptr;
  }
}

template <typename F>
bool sym(void* h, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  return *out != nullptr;
}

Loaded load() {
  Loaded r;
  std::vector<std::string> names;
  if (const char* env = std::getenv("PARTRAIN_CUDNN_LIBRARY"); env != nullptr && *env != '\0') names.push_back(env);
  names.push_back("libcudnn.so.9");
  if (*PARTRAIN_CUDNN_LIBRARY_HINT != '\0') names.push_back(PARTRAIN_CUDNN_LIBRARY_HINT);
  void* h = nullptr;
  std::string tried;
  for (const std::string& n : names) {
    h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) break;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  if (h == nullptr) {
    r.status = Status::unavailable("cuDNN not found (tried " + tried +
                                   "); put libcudnn.so.9 on LD_LIBRARY_PATH or set PARTRAIN_CUDNN_LIBRARY");
    return r;
  }
  CudnnLib& l = r.lib;
  const bool ok = sym(h, "cudnnGetVersion", &l.GetVersion) && sym(h, "cudnnGetErrorString", &l.GetErrorString) &&
                  sym(h, "cudnnCreate", &l.Create) && sym(h, "cudnnDestroy", &l.Destroy) &&
                  sym(h, "cudnnSetStream", &l.SetStream) &&
                  sym(h, "cudnnBackendCreateDescriptor", &l.BackendCreateDescriptor) &&
                  sym(h, "cudnnBackendDestroyDescriptor", &l.BackendDestroyDescriptor) &&
                  sym(h, "cudnnBackendFinalize", &l.BackendFinalize) &&
                  sym(h, "cudnnBackendSetAttribute", &l.BackendSetAttribute) &&
                  sym(h, "cudnnBackendGetAttribute", &l.BackendGetAttribute) &&
                  sym(h, "cudnnBackendExecute", &l.BackendExecute);
  sym(h, "cudnnGetLastErrorString", &l.GetLastErrorString);  // optional
  if (!ok) {
    r.status = Status::unavailable(std::string("cuDNN library lacks a backend-API symbol (") + dlerror() +
                                   "); partrain needs cuDNN 9");
    return r;
  }
  l.version = l.GetVersion();
  if (l.version < 90000 || l.version >= 100000) {
    r.status = Status::unavailable("cuDNN " + std::to_string(l.version) + " loaded; partrain needs cuDNN 9.x");
  }
  return r;
}

}  // namespace

Result<const CudnnLib*> CudnnLib::get() {
  static const Loaded loaded = load();  // thread-safe once
  if (!loaded.status) return loaded.status;
  return &loaded.lib;
}

Status CudnnLib::check(cudnnStatus_t s, const std::string& what) const {
  if (s == CUDNN_STATUS_SUCCESS) return Status::ok();
  const char* name = status_name(s);
  std::string msg = what + ": " + (name != nullptr ? name : GetErrorString(s));
  if (GetLastErrorString != nullptr) {
    char buf[512] = {0};
    GetLastErrorString(buf, sizeof(buf));
    if (buf[0] != '\0') msg += std::string(" (") + buf + ")";
  }
  return Status::internal(msg);
}

Result<CudnnDesc> CudnnDesc::create(const CudnnLib& lib, cudnnBackendDescriptorType_t type) {
  CudnnDesc d;
  d.lib_ = &lib;
  PARTRAIN_RETURN_IF_ERROR(lib.check(lib.BackendCreateDescriptor(type, &d.d_),
                                     "cudnnBackendCreateDescriptor(" + std::to_string(type) + ")"));
  return d;
}

void CudnnDesc::reset() {
  if (d_ != nullptr && lib_ != nullptr) lib_->BackendDestroyDescriptor(d_);
  d_ = nullptr;
}

Status CudnnDesc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                      const void* value, const char* what) const {
  return lib_->check(lib_->BackendSetAttribute(d_, name, type, count, value),
                     std::string("cudnnBackendSetAttribute(") + what + ")");
}

Status CudnnDesc::finalize(const char* what) const {
  return lib_->check(lib_->BackendFinalize(d_), std::string("cudnnBackendFinalize(") + what + ")");
}

// ---- CudnnGraph ------------------------------------------------------------------------------

void CudnnGraph::keep(Status s) {
  if (!s && status_.is_ok()) status_ = std::move(s);
}

int64_t CudnnGraph::tensor(const TensorSpec& spec) {
  const int64_t id = static_cast<int64_t>(specs_.size()) + 1;
  specs_.push_back(spec);
  tensors_.emplace_back();
  if (!status_) return 0;
  Result<CudnnDesc> d = CudnnDesc::create(lib_, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  if (!d) {
    keep(d.status());
    return 0;
  }
  const CudnnDesc& t = *d;
  const int64_t align = 16;
  const bool virt = spec.is_virtual, byval = spec.by_value;
  Status s = t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &spec.type, "TENSOR_DATA_TYPE");
  if (s) s = t.set_i64s(CUDNN_ATTR_TENSOR_DIMENSIONS, spec.dims, "TENSOR_DIMENSIONS");
  if (s) s = t.set_i64s(CUDNN_ATTR_TENSOR_STRIDES, spec.strides, "TENSOR_STRIDES");
  if (s) s = t.set_i64(CUDNN_ATTR_TENSOR_UNIQUE_ID, id, "TENSOR_UNIQUE_ID");
  if (s) s = t.set_i64(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, align, "TENSOR_BYTE_ALIGNMENT");
  if (s && virt) s = t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "TENSOR_IS_VIRTUAL");
  if (s && byval) s = t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval, "TENSOR_IS_BY_VALUE");
  if (s) s = t.finalize("tensor");
  if (!s) {
    keep(s.prefixed("tensor " + std::to_string(id) + ": "));
    return 0;
  }
  tensors_.back() = std::move(*d);
  return id;
}

int64_t CudnnGraph::scalar(float value) {
  const int64_t id = tensor({{1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, false, true});
  scalar_ids_.push_back(id);
  scalar_values_.push_back(value);
  return id;
}

void CudnnGraph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y,
                           cudnnDataType_t compute, int64_t axis) {
  if (!status_) return;
  Result<CudnnDesc> pw = CudnnDesc::create(lib_, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  if (!pw) return keep(pw.status());
  Status s = pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "POINTWISE_MODE");
  if (s) s = pw->set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, "POINTWISE_MATH_PREC");
  if (s && axis >= 0) s = pw->set_i64(CUDNN_ATTR_POINTWISE_AXIS, axis, "POINTWISE_AXIS");
  if (s) s = pw->finalize("pointwise descriptor");
  Result<CudnnDesc> op = CudnnDesc::create(lib_, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  if (s && !op) s = op.status();
  auto td = [&](int64_t id) -> const CudnnDesc& { return tensors_[static_cast<size_t>(id - 1)]; };
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw, "POINTWISE_PW_DESCRIPTOR");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, td(x), "POINTWISE_XDESC");
  if (s && b > 0) s = op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, td(b), "POINTWISE_BDESC");
  if (s && t > 0) s = op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, td(t), "POINTWISE_TDESC");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, td(y), "POINTWISE_YDESC");
  const float one = 1.0f;
  if (s) s = op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "POINTWISE_ALPHA1");
  if (s) s = op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "POINTWISE_ALPHA2");
  if (s) s = op->finalize("pointwise operation");
  if (!s) return keep(s.prefixed("pointwise mode " + std::to_string(mode) + ": "));
  op_parts_.push_back(std::move(*pw));
  ops_.push_back(std::move(*op));
}

void CudnnGraph::reduction(cudnnReduceTensorOp_t op_type, int64_t x, int64_t y) {
  if (!status_) return;
  Result<CudnnDesc> red = CudnnDesc::create(lib_, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  if (!red) return keep(red.status());
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  Status s = red->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_type,
                      "REDUCTION_OPERATOR");
  if (s) s = red->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "REDUCTION_COMP_TYPE");
  if (s) s = red->finalize("reduction descriptor");
  Result<CudnnDesc> op = CudnnDesc::create(lib_, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  if (s && !op) s = op.status();
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensors_[static_cast<size_t>(x - 1)], "REDUCTION_XDESC");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensors_[static_cast<size_t>(y - 1)], "REDUCTION_YDESC");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *red, "REDUCTION_DESC");
  if (s) s = op->finalize("reduction operation");
  if (!s) return keep(s);
  op_parts_.push_back(std::move(*red));
  ops_.push_back(std::move(*op));
}

void CudnnGraph::matmul(int64_t a, int64_t b, int64_t c) {
  if (!status_) return;
  Result<CudnnDesc> mm = CudnnDesc::create(lib_, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  if (!mm) return keep(mm.status());
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  Status s = mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "MATMUL_COMP_TYPE");
  if (s) s = mm->finalize("matmul descriptor");
  Result<CudnnDesc> op = CudnnDesc::create(lib_, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  if (s && !op) s = op.status();
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensors_[static_cast<size_t>(a - 1)], "MATMUL_ADESC");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensors_[static_cast<size_t>(b - 1)], "MATMUL_BDESC");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensors_[static_cast<size_t>(c - 1)], "MATMUL_CDESC");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm, "MATMUL_DESC");
  if (s) s = op->finalize("matmul operation");
  if (!s) return keep(s);
  op_parts_.push_back(std::move(*mm));
  ops_.push_back(std::move(*op));
}

void CudnnGraph::reshape(int64_t x, int64_t y) {
  if (!status_) return;
  Result<CudnnDesc> op = CudnnDesc::create(lib_, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  if (!op) return keep(op.status());
  Status s = op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensors_[static_cast<size_t>(x - 1)], "RESHAPE_XDESC");
  if (s) s = op->set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensors_[static_cast<size_t>(y - 1)], "RESHAPE_YDESC");
  if (s) s = op->finalize("reshape operation");
  if (!s) return keep(s);
  ops_.push_back(std::move(*op));
}

namespace {

// The engine configurations heuristic `mode` proposes for the graph, best first.
Status engine_configs(const CudnnLib& lib, const CudnnDesc& graph, cudnnBackendHeurMode_t mode,
                      std::vector<CudnnDesc>* out) {
  out->clear();
  Result<CudnnDesc> heur = CudnnDesc::create(lib, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  if (!heur) return heur.status();
  PARTRAIN_RETURN_IF_ERROR(heur->set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "ENGINEHEUR_OPERATION_GRAPH"));
  PARTRAIN_RETURN_IF_ERROR(heur->set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "ENGINEHEUR_MODE"));
  PARTRAIN_RETURN_IF_ERROR(heur->finalize("engine heuristics"));
  int64_t count = 0;
  PARTRAIN_RETURN_IF_ERROR(lib.check(lib.BackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                                     "ENGINEHEUR_RESULTS (count)"));
  if (count <= 0) return Status::ok();
  std::vector<CudnnDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    Result<CudnnDesc> c = CudnnDesc::create(lib, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (!c) return c.status();
    raw.push_back(c->get());
    cfgs.push_back(std::move(*c));
  }
  int64_t got = 0;
  PARTRAIN_RETURN_IF_ERROR(lib.check(lib.BackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
                                     "ENGINEHEUR_RESULTS"));
  for (int64_t i = 0; i < got && i < count; ++i) out->push_back(std::move(cfgs[static_cast<size_t>(i)]));
  return Status::ok();
}

// Whether the configuration's engine carries the non-deterministic numerical note; its
// global index in *index.
Status engine_notes(const CudnnLib& lib, const CudnnDesc& cfg, bool* nondeterministic, int64_t* index) {
  *nondeterministic = false;
  *index = -1;
  Result<CudnnDesc> engine = CudnnDesc::create(lib, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (!engine) return engine.status();
  cudnnBackendDescriptor_t raw = engine->get();
  int64_t n = 0;
  PARTRAIN_RETURN_IF_ERROR(lib.check(
      lib.BackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw),
      "ENGINECFG_ENGINE"));
  lib.BackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  n = 0;
  PARTRAIN_RETURN_IF_ERROR(lib.check(lib.BackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                                             CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                                             &n, notes),
                                     "ENGINE_NUMERICAL_NOTE"));
  for (int64_t i = 0; i < n; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) *nondeterministic = true;
  }
  return Status::ok();
}

}  // namespace

Status CudnnGraph::build(cudnnHandle_t handle, bool deterministic) {
  PARTRAIN_RETURN_IF_ERROR(status_);
  Result<CudnnDesc> g = CudnnDesc::create(lib_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (!g) return g.status();
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const CudnnDesc& op : ops_) raw.push_back(op.get());
  PARTRAIN_RETURN_IF_ERROR(g->set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "OPERATIONGRAPH_HANDLE"));
  PARTRAIN_RETURN_IF_ERROR(g->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  static_cast<int64_t>(raw.size()), raw.data(), "OPERATIONGRAPH_OPS"));
  PARTRAIN_RETURN_IF_ERROR(g->finalize("operation graph"));
  graph_ = std::move(*g);
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<CudnnDesc> cfgs;
    const Status hs = engine_configs(lib_, graph_, mode, &cfgs);
    if (!hs) {
      tried += " [heuristic mode " + std::to_string(mode) + ": " + hs.message() + "]";
      continue;
    }
    for (CudnnDesc& cfg : cfgs) {
      bool nondet = false;
      int64_t index = -1;
      if (!engine_notes(lib_, cfg, &nondet, &index)) continue;
      if (deterministic && nondet) {
        tried += " [engine " + std::to_string(index) + ": non-deterministic]";
        continue;
      }
      Result<CudnnDesc> plan = CudnnDesc::create(lib_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (!plan) return plan.status();
      Status s = plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "EXECUTION_PLAN_HANDLE");
      if (s) s = plan->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg, "EXECUTION_PLAN_ENGINE_CONFIG");
      if (s) s = plan->finalize("execution plan");
      if (!s) {
        tried += " [engine " + std::to_string(index) + ": " + s.message() + "]";
        continue;
      }
      int64_t n = 0, ws = 0;
      PARTRAIN_RETURN_IF_ERROR(lib_.check(lib_.BackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                                   CUDNN_TYPE_INT64, 1, &n, &ws),
                                          "EXECUTION_PLAN_WORKSPACE_SIZE"));
      plan_ = std::move(*plan);
      workspace_ = ws;
      engine_ = "engine " + std::to_string(index) + " (heuristic mode " + std::to_string(mode) + ")";
      return Status::ok();
    }
  }
  return Status::unavailable("cuDNN has no engine for this graph:" + (tried.empty() ? std::string(" none proposed") : tried));
}

Status CudnnGraph::execute(cudnnHandle_t handle, const std::vector<std::pair<int64_t, void*>>& ptrs,
                           void* workspace) const {
  if (plan_.get() == nullptr) return Status::internal("cuDNN graph executed before build()");
  std::vector<int64_t> ids;
  std::vector<void*> data;
  for (const auto& [id, p] : ptrs) {
    ids.push_back(id);
    data.push_back(p);
  }
  for (size_t i = 0; i < scalar_ids_.size(); ++i) {
    ids.push_back(scalar_ids_[i]);
    data.push_back(const_cast<float*>(&scalar_values_[i]));
  }
  Result<CudnnDesc> pack = CudnnDesc::create(lib_, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  if (!pack) return pack.status();
  PARTRAIN_RETURN_IF_ERROR(pack->set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                     static_cast<int64_t>(data.size()), data.data(), "VARIANT_PACK_DATA_POINTERS"));
  PARTRAIN_RETURN_IF_ERROR(pack->set_i64s(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, ids, "VARIANT_PACK_UNIQUE_IDS"));
  PARTRAIN_RETURN_IF_ERROR(pack->set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace,
                                     "VARIANT_PACK_WORKSPACE"));
  PARTRAIN_RETURN_IF_ERROR(pack->finalize("variant pack"));
  return lib_.check(lib_.BackendExecute(handle, plan_.get(), pack->get()), "cudnnBackendExecute");
}

}  // namespace partrain::engine::cuda
