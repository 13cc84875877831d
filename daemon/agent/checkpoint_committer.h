// The coordinator agent's checkpoint committer: a thread that waits, on its own rendezvous
// connection, for rank 0 to announce a save (PREFIX ckpt/seq/N; every key in comm/rendezvous/keys.h), then for every rank's
// piece records of that step (PREFIX ckpt/STEP/RANK: the rank's shard is durable), merges
// them into one checkpoint, commits it through the state store (one synced WriteBatch;
// store/coordinator.h) and acknowledges (PREFIX ckpt/STEP/ack = "ok" or the error).
// Workers block on the ack, so no rank runs ahead of an uncommitted final save.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "comm/rendezvous/client.h"
#include "store/coordinator.h"

namespace partrain::agent {

class CheckpointCommitter {
 public:
  CheckpointCommitter(std::unique_ptr<comm::RendezvousClient> client, store::Coordinator* coordinator,
                      std::string prefix, int world);
  ~CheckpointCommitter();  // stop()s
  // Ends the thread after the commit in progress, if any.
  void stop();
  int committed() const { return committed_.load(); }

 private:
  void loop();
  // Waits for `key` until it appears or stop(); false when stopped.
  bool wait_for(const std::string& key, std::string* value);
  void commit_step(int64_t step);

  std::unique_ptr<comm::RendezvousClient> client_;
  store::Coordinator* coordinator_;
  std::string prefix_;
  int world_;
  std::atomic<bool> stop_{false};
  std::atomic<int> committed_{0};
  std::thread thread_;
};

}  // namespace partrain::agent
