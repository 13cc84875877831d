// See commit_requester.h.
#include "worker/commit_requester.h"

#include <fmt/format.h>

#include "comm/rendezvous/keys.h"

namespace partrain::worker {

CommitRequester::CommitRequester(std::unique_ptr<comm::RendezvousClient> client, std::string prefix,
                               std::chrono::milliseconds commit_timeout)
    : client_(std::move(client)), prefix_(std::move(prefix)), timeout_(commit_timeout) {}

Status CommitRequester::commit(const store::TrainState& state, int rank, std::vector<store::PieceRecord> pieces) {
  const std::string value = (rank == 0 ? store::encode_state(state) : std::string()) + store::encode_pieces(pieces);
  PARTRAIN_RETURN_IF_ERROR(client_->set(rdzv_keys::checkpoint_rank(prefix_, state.step, rank), value));
  if (rank == 0) {
    PARTRAIN_RETURN_IF_ERROR(client_->set(rdzv_keys::checkpoint_seq(prefix_, saves_++), std::to_string(state.step)));
  }
  Result<std::string> ack = client_->get(rdzv_keys::checkpoint_ack(prefix_, state.step), timeout_);
  if (!ack) return ack.status();
  if (*ack != "ok") {
    return Status::io_error(fmt::format("checkpoint of step {} was not committed: {}", state.step, *ack));
  }
  return Status::ok();
}

}  // namespace partrain::worker
