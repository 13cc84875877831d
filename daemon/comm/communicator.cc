#include "comm/communicator.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace partrain::comm {
namespace {

class FinishedWork final : public Work {
 public:
  explicit FinishedWork(Status status) : status_(std::move(status)) {}
  Status wait() override { return status_; }

 private:
  Status status_;
};

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

WorkHandle finished_work(Status status) { return std::make_shared<FinishedWork>(std::move(status)); }

Result<int> group_rank_of(const GroupSpec& spec) {
  if (spec.name.empty()) return Status::invalid("communicator group has no name; give each group a unique one");
  if (spec.members.empty()) return Status::invalid(fmt::format("communicator group '{}' has no members", spec.name));
  std::set<int> seen;
  for (int m : spec.members) {
    if (m < 0) return Status::invalid(fmt::format("communicator group '{}' lists negative rank {}", spec.name, m));
    if (!seen.insert(m).second) {
      return Status::invalid(fmt::format("communicator group '{}' lists rank {} twice", spec.name, m));
    }
  }
  auto it = std::find(spec.members.begin(), spec.members.end(), spec.global_rank);
  if (it == spec.members.end()) {
    return Status::invalid(fmt::format("global rank {} is not a member of communicator group '{}'",
                                       spec.global_rank, spec.name));
  }
  return static_cast<int>(it - spec.members.begin());
}

WorkHandle Communicator::reduce_scatter(const float* in, float* out, size_t count, ReduceOp op) {
  return reduce_scatter(in, out, std::vector<size_t>(static_cast<size_t>(size()), count), op);
}

WorkHandle Communicator::all_gather(const float* in, float* out, size_t count) {
  return all_gather(in, out, std::vector<size_t>(static_cast<size_t>(size()), count));
}

}  // namespace partrain::comm
