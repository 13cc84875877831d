// See comm_adapter.h. No exception leaves these functions: they are called from plugins.
#include "worker/comm_adapter.h"

#include <cstdio>
#include <vector>

namespace partrain::worker {
namespace {

int fail(int code, const std::string& msg, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", msg.c_str());
  return code;
}

bool reduce_op(int op, comm::ReduceOp* out) {
  switch (op) {
    case PARTRAIN_REDUCE_SUM: *out = comm::ReduceOp::kSum; return true;
    case PARTRAIN_REDUCE_AVG: *out = comm::ReduceOp::kAvg; return true;
    case PARTRAIN_REDUCE_MAX: *out = comm::ReduceOp::kMax; return true;
    default: return false;
  }
}

// Runs start() (which returns the operation's WorkHandle) and hands the handle out as *work.
template <typename F>
int start(const char* what, void** work, char* err, size_t err_len, F&& start) noexcept {
  try {
    if (work == nullptr) return fail(PARTRAIN_EINVAL, std::string(what) + ": work is NULL", err, err_len);
    *work = new comm::WorkHandle(start());
    return PARTRAIN_OK;
  } catch (const std::exception& e) {
    return fail(PARTRAIN_EINTERNAL, e.what(), err, err_len);
  }
}

int all_reduce(void* ctx, float* data, size_t count, int op, void** work, char* err,
               size_t err_len) noexcept {
  comm::ReduceOp rop{};
  if (!reduce_op(op, &rop)) return fail(PARTRAIN_EINVAL, "all_reduce: unknown op " + std::to_string(op), err, err_len);
  return start("all_reduce", work, err, err_len, [&] {
    return static_cast<comm::Communicator*>(ctx)->all_reduce(data, count, rop);
  });
}

// The group's per-rank counts as a vector (the C side passes size() of them).
std::vector<size_t> counts_of(void* ctx, const size_t* counts) {
  const auto* c = static_cast<comm::Communicator*>(ctx);
  if (counts == nullptr) return {};
  return std::vector<size_t>(counts, counts + c->size());
}

int reduce_scatter(void* ctx, const float* in, float* out, const size_t* counts, int op,
                   void** work, char* err, size_t err_len) noexcept {
  comm::ReduceOp rop{};
  if (!reduce_op(op, &rop)) return fail(PARTRAIN_EINVAL, "reduce_scatter: unknown op " + std::to_string(op), err, err_len);
  if (counts == nullptr) return fail(PARTRAIN_EINVAL, "reduce_scatter: counts is NULL", err, err_len);
  return start("reduce_scatter", work, err, err_len, [&] {
    return static_cast<comm::Communicator*>(ctx)->reduce_scatter(in, out, counts_of(ctx, counts), rop);
  });
}

int all_gather(void* ctx, const float* in, float* out, const size_t* counts, void** work,
               char* err, size_t err_len) noexcept {
  if (counts == nullptr) return fail(PARTRAIN_EINVAL, "all_gather: counts is NULL", err, err_len);
  return start("all_gather", work, err, err_len, [&] {
    return static_cast<comm::Communicator*>(ctx)->all_gather(in, out, counts_of(ctx, counts));
  });
}

int all_to_allv(void* ctx, const float* in, const size_t* send_counts, float* out,
                const size_t* recv_counts, void** work, char* err, size_t err_len) noexcept {
  if (send_counts == nullptr || recv_counts == nullptr) {
    return fail(PARTRAIN_EINVAL, "all_to_allv: counts is NULL", err, err_len);
  }
  return start("all_to_allv", work, err, err_len, [&] {
    return static_cast<comm::Communicator*>(ctx)->all_to_allv(in, counts_of(ctx, send_counts), out,
                                                               counts_of(ctx, recv_counts));
  });
}

int broadcast(void* ctx, float* data, size_t count, int root, void** work, char* err,
              size_t err_len) noexcept {
  return start("broadcast", work, err, err_len, [&] {
    return static_cast<comm::Communicator*>(ctx)->broadcast(data, count, root);
  });
}

int exchange(void* ctx, const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from,
             void** work, char* err, size_t err_len) noexcept {
  auto* c = static_cast<comm::Communicator*>(ctx);
  std::vector<comm::Communicator::P2pOp> ops;
  if (send_count > 0) ops.push_back({true, c->f32(send, send_count), to});
  if (recv_count > 0) ops.push_back({false, c->f32(recv, recv_count), from});
  return start("exchange", work, err, err_len, [&] { return c->batch_send_recv(ops); });
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

// The fields both versions share.
template <typename C>
C common_fields(comm::Communicator* comm) {
  C c{};
  c.ctx = comm;
  c.rank = comm->rank();
  c.size = comm->size();
  c.all_reduce = &all_reduce;
  c.wait = &wait;
  return c;
}

partrain_comm_v1_t make_plugin_comm(comm::Communicator* comm) {
  return common_fields<partrain_comm_v1_t>(comm);
}

partrain_comm_v2_t make_plugin_comm_v2(comm::Communicator* comm) {
  partrain_comm_v2_t c = common_fields<partrain_comm_v2_t>(comm);
  c.reduce_scatter = &reduce_scatter;
  c.all_gather = &all_gather;
  c.broadcast = &broadcast;
  return c;
}

partrain_p2p_v1_t make_plugin_p2p(comm::Communicator* comm) {
  partrain_p2p_v1_t p{};
  p.ctx = comm;
  p.rank = comm->rank();
  p.size = comm->size();
  p.exchange = &exchange;
  p.wait = &wait;
  return p;
}

partrain_alltoall_v1_t make_plugin_all_to_all(comm::Communicator* comm) {
  partrain_alltoall_v1_t a{};
  a.ctx = comm;
  a.rank = comm->rank();
  a.size = comm->size();
  a.all_to_allv = &all_to_allv;
  a.wait = &wait;
  return a;
}

}  // namespace partrain::worker
