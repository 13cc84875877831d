// See context_plugin_comm.h.
#include "worker/context_plugin_comm.h"

#include <cstdio>

#include <fmt/format.h>

#include "worker/comm_adapter.h"

namespace partrain::worker {

// What the plugin's callbacks reach through blocks.ctx: the model's compute for this call,
// the block shape, the backend.
struct ContextPluginComm::Call {
  const Attend* attend = nullptr;
  const AttendBackward* attend_backward = nullptr;
  engine::Shape shape;
  engine::Backend* be = nullptr;
  engine::Tensor view(const float* p) const { return engine::Tensor{const_cast<float*>(p), engine::DType::kF32, shape}; }
};

namespace {

int fail(const char* what, char* err, size_t err_len) {
  std::snprintf(err, err_len, "%s", what);
  return PARTRAIN_EINTERNAL;
}

}  // namespace

ContextPluginComm::~ContextPluginComm() {
  if (state_ != nullptr) api_->finalize(state_);
}

Status ContextPluginComm::init(const std::string& config_toml, int global_rank, int world) {
  comm_ = make_plugin_comm_v2(cp_);
  p2p_ = make_plugin_p2p(cp_);
  const partrain_context_init_args_v1_t args{sizeof(partrain_context_init_args_v1_t), config_toml.c_str(), &comm_,
                                             &p2p_, global_rank, world};
  int rc = api_->init(&args, &state_, err_, sizeof err_);
  size_t blocks = 0;
  if (rc == PARTRAIN_OK) rc = api_->scratch_blocks(state_, &blocks, err_, sizeof err_);
  if (rc == PARTRAIN_OK) {
    scratch_blocks_ = static_cast<int>(blocks);
    return Status::ok();
  }
  err_[sizeof err_ - 1] = '\0';
  const std::string msg = fmt::format("context plugin {}: init: {}", api_->name, err_);
  return rc == PARTRAIN_EINVAL ? Status::invalid(msg) : Status::unavailable(msg);
}

void ContextPluginComm::keep(int rc, const char* what) {
  if (rc == PARTRAIN_OK) return;
  err_[sizeof err_ - 1] = '\0';
  const std::string msg = fmt::format("context plugin {}: {}: {}", api_->name, what, err_);
  status_ = rc == PARTRAIN_EUNAVAIL ? Status::unavailable(msg)
            : rc == PARTRAIN_EINVAL ? Status::invalid(msg)
                                    : Status::internal(msg);
}

// The blocks table of one call: the model's compute and the backend's zero/add behind C
// function pointers (no exception crosses back into the plugin).
partrain_context_blocks_v1_t ContextPluginComm::blocks(Call* call, const engine::Tensor& kv,
                                                        const engine::Tensor& dkv, const engine::Tensor& scratch) {
  partrain_context_blocks_v1_t b{};
  b.ctx = call;
  b.count = static_cast<size_t>(kv.numel());
  b.kv = kv.ptr<float>();
  b.dkv = dkv.empty() ? nullptr : dkv.ptr<float>();
  b.scratch = scratch.empty() ? nullptr : scratch.ptr<float>();
  b.attend = [](void* ctx, int source, const float* block, char* err, size_t err_len) noexcept {
    try {
      const auto* c = static_cast<Call*>(ctx);
      (*c->attend)(source, c->view(block));
      return PARTRAIN_OK;
    } catch (const std::exception& e) {
      return fail(e.what(), err, err_len);
    }
  };
  b.attend_backward = [](void* ctx, int source, const float* block, float* dblock, char* err, size_t err_len) noexcept {
    try {
      const auto* c = static_cast<Call*>(ctx);
      (*c->attend_backward)(source, c->view(block), c->view(dblock));
      return PARTRAIN_OK;
    } catch (const std::exception& e) {
      return fail(e.what(), err, err_len);
    }
  };
  b.zero = [](void* ctx, float* data, size_t n, char*, size_t) noexcept {
    static_cast<Call*>(ctx)->be->zero(engine::Tensor{data, engine::DType::kF32, {static_cast<int64_t>(n)}});
    return PARTRAIN_OK;
  };
  b.add = [](void* ctx, float* dst, const float* src, size_t n, char*, size_t) noexcept {
    const engine::Shape s{static_cast<int64_t>(n)};
    static_cast<Call*>(ctx)->be->accumulate(engine::Tensor{dst, engine::DType::kF32, s},
                                            engine::Tensor{const_cast<float*>(src), engine::DType::kF32, s});
    return PARTRAIN_OK;
  };
  return b;
}

void ContextPluginComm::forward(const engine::Tensor& kv, const engine::Tensor& scratch, const Attend& attend) {
  if (!status_) return;
  Call call{&attend, nullptr, kv.shape, be_};
  const partrain_context_blocks_v1_t b = blocks(&call, kv, engine::Tensor{}, scratch);
  keep(api_->forward(state_, &b, err_, sizeof err_), "forward");
}

void ContextPluginComm::backward(const engine::Tensor& kv, const engine::Tensor& dkv, const engine::Tensor& scratch,
                                 const AttendBackward& attend_backward) {
  if (!status_) return;
  Call call{nullptr, &attend_backward, kv.shape, be_};
  const partrain_context_blocks_v1_t b = blocks(&call, kv, dkv, scratch);
  keep(api_->backward(state_, &b, err_, sizeof err_), "backward");
}

void ContextPluginComm::all_gather(const engine::Tensor& full, const engine::Tensor& part) {
  if (!status_) return;
  keep(api_->gather(state_, part.ptr<float>(), full.ptr<float>(), static_cast<size_t>(part.numel()), err_,
                    sizeof err_),
       "gather");
}

Status ContextPluginComm::step_end(partrain_context_stats_v1_t* stats) {
  PARTRAIN_RETURN_IF_ERROR(status_);
  *stats = {};
  if (api_->step_end == nullptr) return Status::ok();
  keep(api_->step_end(state_, stats, err_, sizeof err_), "step_end");
  return status_;
}

}  // namespace partrain::worker
