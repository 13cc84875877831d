// See group_sums.h.
#include "worker/group_sums.h"

#include <algorithm>
#include <climits>
#include <vector>

namespace partrain::worker {
namespace {

// A wall-clock time in microseconds as three 22-bit pieces, each exact in a float.
void pack_us(int64_t us, float* out) {
  const uint64_t u = static_cast<uint64_t>(us);
  out[0] = static_cast<float>(u >> 44);
  out[1] = static_cast<float>((u >> 22) & 0x3fffff);
  out[2] = static_cast<float>(u & 0x3fffff);
}
int64_t unpack_us(const float* in) {
  return static_cast<int64_t>((static_cast<uint64_t>(in[0]) << 44) | (static_cast<uint64_t>(in[1]) << 22) |
                              static_cast<uint64_t>(in[2]));
}

}  // namespace

Result<double> sum_over(comm::Communicator& group, double x) {
  const Split2 p = split(x);
  float parts[2] = {p.head, p.rest};
  PARTRAIN_RETURN_IF_ERROR(group.all_reduce(parts, 2, comm::ReduceOp::kSum)->wait());
  return join(parts[0], parts[1]);
}

Status measure_bubble(comm::Communicator& pp, int P, int64_t begin_us, int64_t end_us, int64_t busy_us,
                      double* bubble) {
  float mine[9];
  pack_us(begin_us, mine);
  pack_us(end_us, mine + 3);
  pack_us(busy_us, mine + 6);
  std::vector<float> all(static_cast<size_t>(9 * P));
  PARTRAIN_RETURN_IF_ERROR(pp.all_gather(mine, all.data(), 9)->wait());
  int64_t begin = INT64_MAX, end = 0, busy = 0;
  for (int r = 0; r < P; ++r) {
    const float* x = all.data() + 9 * r;
    begin = std::min(begin, unpack_us(x));
    end = std::max(end, unpack_us(x + 3));
    busy += unpack_us(x + 6);
  }
  const double makespan = static_cast<double>(end - begin);
  *bubble = makespan > 0 ? 1.0 - static_cast<double>(busy) / (P * makespan) : 0.0;
  return Status::ok();
}

}  // namespace partrain::worker
