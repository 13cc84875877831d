// See zero_comm.h.
#include "worker/zero_comm.h"

#include "worker/group_sums.h"

namespace partrain::worker {

ZeroComm::ZeroComm(DataPluginComm* plugin, comm::Communicator* dp, const engine::model::Model& part,
                   int64_t view_offset)
    : plugin_(plugin), dp_(dp), view_offset_(view_offset),
      shift_(view_offset + part.shard().begin - static_cast<int64_t>(plugin->plan().shard_begin)) {}

void ZeroComm::reduce_grads(const engine::Tensor& data, int64_t offset, const engine::Tensor& shard) {
  if (!status_ || data.numel() == 0) return;  // a stage without embeddings has an empty segment
  status_ = plugin_->grads_ready(data.ptr<float>(), static_cast<size_t>(view_offset_ + offset),
                                 static_cast<size_t>(data.numel()), shard_base(shard));
}

void ZeroComm::release_grads(int64_t offset, int64_t count) {
  if (status_ && count > 0) {
    status_ = plugin_->grads_release(static_cast<size_t>(view_offset_ + offset), static_cast<size_t>(count));
  }
}

void ZeroComm::gather_params(const engine::Tensor& shard, const engine::Tensor& dst, int64_t offset) {
  if (!status_ || dst.numel() == 0) return;
  status_ = plugin_->params_gather(shard_base(shard), dst.ptr<float>(), static_cast<size_t>(view_offset_ + offset),
                                   static_cast<size_t>(dst.numel()));
}

void ZeroComm::wait_params(const engine::Tensor& dst) {
  if (status_ && dst.numel() > 0) status_ = plugin_->params_wait(dst.ptr<float>());
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
