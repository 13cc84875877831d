// Megatron-core's communication regions (tensor_parallel.h) on a TensorComm.
#include "engine/model/tensor_parallel.h"

namespace partrain::engine::model {

Tensor Regions::enter_forward(const Tensor& rows, const Tensor& full) const {
  if (!active() || !tp_.sp) return rows;  // copy_to_region: identity
  comm_->all_gather(full, rows);          // gather_from_sequence
  return full;
}

Tensor Regions::enter_backward(const Tensor& dfull, const Tensor& drows) const {
  if (!active()) return dfull;
  if (!tp_.sp) {
    comm_->all_reduce_sum(dfull);  // copy_to_region's conjugate
    return dfull;
  }
  comm_->reduce_scatter(drows, dfull);  // gather_from_sequence's conjugate
  return drows;
}

Tensor Regions::leave_forward(const Tensor& partial, const Tensor& rows) const {
  if (!active()) return partial;
  if (!tp_.sp) {
    comm_->all_reduce_sum(partial);  // reduce_from_region
    return partial;
  }
  comm_->reduce_scatter(rows, partial);  // reduce_scatter_to_sequence
  return rows;
}

Tensor Regions::leave_backward(const Tensor& drows, const Tensor& dfull) const {
  if (!active() || !tp_.sp) return drows;  // reduce_from_region's conjugate: identity
  comm_->all_gather(dfull, drows);         // reduce_scatter_to_sequence's conjugate
  return dfull;
}

}  // namespace partrain::engine::model
