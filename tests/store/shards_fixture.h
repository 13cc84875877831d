// The fixture the store's unit tests share: a small model's logical tensors and a temp
// checkpoint root where a test writes real dp shards (values known by construction:
// element index + 1000 * role) and builds the Checkpoint records a commit would carry.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "store/manifest.h"
#include "store/shard_file.h"
#include "test_util.h"

namespace partrain::store {

inline std::vector<LogicalTensor> tensors() {
  return {{"wte.weight", {7, 3}}, {"h.0.ln_1.bias", {5}}, {"ln_f.weight", {2}}};
}

class Shards : public ::testing::Test {
 protected:
  // Rank r of dp writes its slice; the values are element index + 1000 * role.
  std::vector<PieceRecord> write_dp(int64_t step, int dp, int r) {
    std::vector<std::vector<float>> bufs;
    std::vector<PieceData> pieces;
    for (const PieceSpec& s : dp_slice_pieces(tensors(), dp, r)) {
      std::vector<float> v(static_cast<size_t>(s.end - s.begin));
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<float>(s.begin + static_cast<int64_t>(i) + 1000 * static_cast<int>(s.role));
      }
      bufs.push_back(std::move(v));
      pieces.push_back({s, nullptr});
    }
    for (size_t i = 0; i < pieces.size(); ++i) pieces[i].data = bufs[i].data();
    Result<std::vector<PieceRecord>> recs = write_shard(root_, step, r, pieces);
    EXPECT_TRUE(recs.is_ok()) << recs.status().message();
    return recs.is_ok() ? *recs : std::vector<PieceRecord>{};
  }
  Checkpoint checkpoint(int64_t step, int dp) {
    Checkpoint c;
    c.state.step = step;
    c.state.world = dp;
    for (int r = 0; r < dp; ++r) {
      for (PieceRecord& p : write_dp(step, dp, r)) c.pieces.push_back(p);
    }
    return c;
  }
  const partrain::testing::ScratchDir scratch_{"partrain_store"};
  const std::string root_ = scratch_.path().string();
};

}  // namespace partrain::store
