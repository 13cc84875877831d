// See checkpoint_committer.h.
#include "agent/checkpoint_committer.h"

#include <chrono>

#include <fmt/format.h>

#include "comm/rendezvous/keys.h"
#include "common/log.h"

namespace partrain::agent {

using std::chrono::milliseconds;

CheckpointCommitter::CheckpointCommitter(std::unique_ptr<comm::RendezvousClient> client,
                                         store::Coordinator* coordinator, std::string prefix, int world)
    : client_(std::move(client)), coordinator_(coordinator), prefix_(std::move(prefix)), world_(world),
      thread_([this] { loop(); }) {}

CheckpointCommitter::~CheckpointCommitter() { stop(); }

void CheckpointCommitter::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

bool CheckpointCommitter::wait_for(const std::string& key, std::string* value) {
  while (!stop_.load()) {
    Result<std::string> v = client_->get(key, milliseconds(200));
    if (v) {
      *value = std::move(v).value();
      return true;
    }
    if (v.status().code() != StatusCode::kUnavailable) {
      log::error("agent", "checkpoint committer: {}", v.status().message());
      return false;
    }
  }
  return false;
}

void CheckpointCommitter::commit_step(int64_t step) {
  store::Checkpoint c;
  Status status;
  for (int r = 0; r < world_ && status.is_ok(); ++r) {
    std::string text;
    if (!wait_for(rdzv_keys::checkpoint_rank(prefix_, step, r), &text)) return;  // stopped
    if (r == 0) {
      Result<store::TrainState> st = store::decode_state(text);
      if (!st) {
        status = st.status();
        break;
      }
      c.state = *st;
    }
    Result<std::vector<store::PieceRecord>> pieces = store::decode_pieces(text);
    if (!pieces) {
      status = pieces.status().prefixed(fmt::format("rank {}: ", r));
      break;
    }
    for (store::PieceRecord& p : *pieces) c.pieces.push_back(std::move(p));
  }
  if (status.is_ok() && c.state.step != step) {
    status = Status::internal(fmt::format("rank 0 announced step {} but wrote step {}", step, c.state.step));
  }
  if (status.is_ok()) status = coordinator_->commit(c);
  if (status.is_ok()) committed_.fetch_add(1);
  if (!status) log::error("agent", "checkpoint of step {} not committed: {}", step, status.message());
  (void)client_->set(rdzv_keys::checkpoint_ack(prefix_, step), status.is_ok() ? "ok" : status.message());
}

void CheckpointCommitter::loop() {
  for (int n = 0; !stop_.load(); ++n) {
    std::string text;
    if (!wait_for(rdzv_keys::checkpoint_seq(prefix_, n), &text)) return;
    commit_step(std::stoll(text));
  }
}

}  // namespace partrain::agent
