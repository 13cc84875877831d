// See zero_comm.h.
#include "worker/zero_comm.h"

#include "worker/group_sums.h"

namespace partrain::worker {

void ZeroComm::reduce_grads(const engine::Tensor& data, int64_t offset, const engine::Tensor& shard) {
  if (!status_) return;
  status_ = plugin_->grads_ready(data.ptr<float>(), static_cast<size_t>(offset), static_cast<size_t>(data.numel()),
                                 shard.ptr<float>());
}

void ZeroComm::release_grads(int64_t offset, int64_t count) {
  if (status_) status_ = plugin_->grads_release(static_cast<size_t>(offset), static_cast<size_t>(count));
}

void ZeroComm::gather_params(const engine::Tensor& shard, const engine::Tensor& dst, int64_t offset) {
  if (!status_) return;
  status_ = plugin_->params_gather(shard.ptr<float>(), dst.ptr<float>(), static_cast<size_t>(offset),
                                   static_cast<size_t>(dst.numel()));
}

void ZeroComm::wait_params(const engine::Tensor& dst) {
  if (status_) status_ = plugin_->params_wait(dst.ptr<float>());
}

double ZeroComm::sum(double x) {
  if (!status_) return x;
  Result<double> s = sum_over(*dp_, x);
  if (!s) {
    status_ = s.status();
    return x;
  }
  return *s;
}

}  // namespace partrain::worker
