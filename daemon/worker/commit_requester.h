// A worker's Committer (store/saver.h): it tells the coordinator agent through the
// rendezvous store that this rank's shard of a step is durable, and waits for the commit.
// Workers never open the RocksDB state store; the coordinator agent alone does.
//
// Keys (PREFIX = this attempt's, e.g. "a0.0/"; built in comm/rendezvous/keys.h):
//   PREFIX ckpt/STEP/RANK   this rank's piece records (rank 0's start with the state line)
//   PREFIX ckpt/seq/N       rank 0's N-th save of this attempt is of step STEP
//   PREFIX ckpt/STEP/ack    set by the coordinator: "ok", or why the commit failed
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/rendezvous/client.h"
#include "store/saver.h"

namespace partrain::worker {

class CommitRequester final : public store::Committer {
 public:
  // `client` is this committer's own connection: the wait for the commit may block it.
  CommitRequester(std::unique_ptr<comm::RendezvousClient> client, std::string prefix,
                 std::chrono::milliseconds commit_timeout = std::chrono::minutes(10));
  Status commit(const store::TrainState& state, int rank, std::vector<store::PieceRecord> pieces) override;

 private:
  std::unique_ptr<comm::RendezvousClient> client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  int saves_ = 0;
};

}  // namespace partrain::worker
