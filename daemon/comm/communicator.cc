#include "comm/communicator.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

const char* memory_name(Memory m) { return m == Memory::kHost ? "host" : "device"; }

namespace {

size_t total(const std::vector<size_t>& counts) {
  size_t n = 0;
  for (size_t c : counts) n += c;
  return n;
}

}  // namespace

WorkHandle Communicator::reduce_scatter(const float* in, float* out, const std::vector<size_t>& counts,
                                        ReduceOp op) {
  const size_t mine = counts.size() == static_cast<size_t>(size()) ? counts[static_cast<size_t>(rank_)] : 0;
  return reduce_scatter(f32(in, total(counts)), f32(out, mine), counts, op);
}

WorkHandle Communicator::reduce_scatter(const float* in, float* out, size_t count, ReduceOp op) {
  return reduce_scatter(in, out, std::vector<size_t>(static_cast<size_t>(size()), count), op);
}

WorkHandle Communicator::all_gather(const float* in, float* out, const std::vector<size_t>& counts) {
  const size_t mine = counts.size() == static_cast<size_t>(size()) ? counts[static_cast<size_t>(rank_)] : 0;
  return all_gather(f32(in, mine), f32(out, total(counts)), counts);
}

WorkHandle Communicator::all_gather(const float* in, float* out, size_t count) {
  return all_gather(in, out, std::vector<size_t>(static_cast<size_t>(size()), count));
}

WorkHandle Communicator::all_to_allv(const float* in, const std::vector<size_t>& send_counts, float* out,
                                     const std::vector<size_t>& recv_counts) {
  return all_to_allv(f32(in, total(send_counts)), send_counts, f32(out, total(recv_counts)), recv_counts);
}

std::string Communicator::describe() const {
  const GroupSpec& g = group();
  return fmt::format("group '{}' ({} transport, members [{}], rank {} of {})", g.name, backend(),
                     fmt::join(g.members, ","), rank_, size());
}

Status Communicator::check_buffer(const char* op, const Buffer& b) const {
  if (b.count > 0 && b.data == nullptr) {
    return Status::invalid(fmt::format("{} on {}: null buffer of {} {} elements", op, describe(), b.count,
                                       dtype_name(b.dtype)));
  }
  if (b.memory != memory()) {
    return Status::invalid(fmt::format(
        "{} on {}: a {} buffer given to a transport that moves {} memory; pass {} memory (a {} tensor on GPU "
        "ranks, host values through the group's host channel)", op, describe(), memory_name(b.memory),
        memory_name(memory()), memory_name(memory()), memory() == Memory::kDevice ? "backend" : "host"));
  }
  return Status::ok();
}

Status Communicator::check_counts(const char* op, const std::vector<size_t>& counts) const {
  if (counts.size() != static_cast<size_t>(size())) {
    return Status::invalid(fmt::format("{} on {}: {} counts given, one per rank ({}) needed", op, describe(),
                                       counts.size(), size()));
  }
  return Status::ok();
}

}  // namespace partrain::comm
