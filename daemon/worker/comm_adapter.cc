// See comm_adapter.h. No exception leaves these functions: they are called from plugins.
#include "worker/comm_adapter.h"

#include <cstdio>

namespace partrain::worker {
namespace {

int fail(int code, const std::string& msg, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", msg.c_str());
  return code;
}

int all_reduce(void* ctx, float* data, size_t count, int op, void** work, char* err,
               size_t err_len) noexcept {
  try {
    if (work == nullptr) return fail(PARTRAIN_EINVAL, "all_reduce: work is NULL", err, err_len);
    comm::ReduceOp rop = comm::ReduceOp::kSum;
    switch (op) {
      case PARTRAIN_REDUCE_SUM: rop = comm::ReduceOp::kSum; break;
      case PARTRAIN_REDUCE_AVG: rop = comm::ReduceOp::kAvg; break;
      case PARTRAIN_REDUCE_MAX: rop = comm::ReduceOp::kMax; break;
      default: return fail(PARTRAIN_EINVAL, "all_reduce: unknown op " + std::to_string(op), err, err_len);
    }
    auto* c = static_cast<comm::Communicator*>(ctx);
    *work = new comm::WorkHandle(c->all_reduce(data, count, rop));
    return PARTRAIN_OK;
  } catch (const std::exception& e) {
    return fail(PARTRAIN_EINTERNAL, e.what(), err, err_len);
  }
}

int wait(void* /*ctx*/, void* work, char* err, size_t err_len) noexcept {
  try {
    if (work == nullptr) return fail(PARTRAIN_EINVAL, "wait: work is NULL", err, err_len);
    auto* handle = static_cast<comm::WorkHandle*>(work);
    const Status s = (*handle)->wait();
    delete handle;
    if (s.is_ok()) return PARTRAIN_OK;
    return fail(s.code() == StatusCode::kUnavailable ? PARTRAIN_EUNAVAIL : PARTRAIN_EINTERNAL,
                s.message(), err, err_len);
  } catch (const std::exception& e) {
    return fail(PARTRAIN_EINTERNAL, e.what(), err, err_len);
  }
}

}  // namespace

partrain_comm_v1_t make_plugin_comm(comm::Communicator* comm) {
  partrain_comm_v1_t c{};
  c.ctx = comm;
  c.rank = comm->rank();
  c.size = comm->size();
  c.all_reduce = &all_reduce;
  c.wait = &wait;
  return c;
}

}  // namespace partrain::worker
