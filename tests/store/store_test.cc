// The state store's pieces against independent references: CRC-32C against RFC 3720's
// test vectors, shard files against hand-made damage (a flipped byte, a cut file), the
// RocksDB store's commits, retention and reopening, and dp slicing covering every element.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "store/coordinator.h"
#include "common/crc32c.h"
#include "store/manifest.h"
#include "store/run_inputs.h"
#include "store/shard_file.h"
#include "store/state_store.h"
#include "shards_fixture.h"

namespace partrain::store {
namespace {

namespace fs = std::filesystem;

// RFC 3720 appendix B.4 (iSCSI CRC32C) and the common "123456789" check value.
TEST(Crc32c, MatchesPublishedVectors) {
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
    dec[static_cast<size_t>(i)] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  // Continuing over a split gives the checksum of the whole.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(Manifest, DpSlicesCoverEveryElementOnce) {
  for (int dp : {1, 2, 3, 4, 8}) {
    std::vector<PieceRecord> all;
    for (int r = 0; r < dp; ++r) {
      for (const PieceSpec& s : dp_slice_pieces(tensors(), dp, r)) {
        PieceRecord rec;
        rec.spec = s;
        rec.bytes = static_cast<uint64_t>(s.end - s.begin) * 4;
        all.push_back(rec);
      }
    }
    EXPECT_TRUE(check_complete(all, tensors()).is_ok()) << "dp" << dp;
    all.pop_back();
    EXPECT_FALSE(check_complete(all, tensors()).is_ok()) << "dp" << dp;
  }
}

TEST(Manifest, RoundTripsThroughText) {
  Checkpoint c;
  c.state = {12, 192, 1, 1337, 12, 12, 1.0, 12288, "dp2", 2};
  PieceRecord p;
  p.spec = {"h.0.attn.c_attn.weight", {384, 128}, Role::kAdamV, 100, 24576};
  p.file = "step-000000000012/rank-00001.bin";
  p.offset = 4096;
  p.bytes = (24576 - 100) * 4;
  p.crc32c = 0xdeadbeef;
  c.pieces = {p};
  Result<Checkpoint> back = decode_checkpoint(encode_checkpoint(c));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->state.step, 12);
  EXPECT_EQ(back->state.consumed_samples, 192u);
  EXPECT_EQ(back->state.layout, "dp2");
  ASSERT_EQ(back->pieces.size(), 1u);
  EXPECT_EQ(back->pieces[0].spec.shape, (std::vector<int64_t>{384, 128}));
  EXPECT_EQ(back->pieces[0].spec.role, Role::kAdamV);
  EXPECT_EQ(back->pieces[0].crc32c, 0xdeadbeefu);
  EXPECT_FALSE(decode_checkpoint("state\tstep=x\n").is_ok());
  EXPECT_FALSE(decode_pieces("piece\ta\tweight\n").is_ok());
}

TEST_F(Shards, ReadBackOnAnotherSplit) {
  const Checkpoint c = checkpoint(4, 3);
  ASSERT_TRUE(verify_checkpoint(root_, c).is_ok());
  // A dp2 rank 1 wants [10, 21) of wte's adam_m: pieces of ranks 1 and 2 of dp3 hold it.
  std::vector<float> got(11);
  ASSERT_TRUE(read_range(root_, c, "wte.weight", Role::kAdamM, 10, 21, got.data()).is_ok());
  for (int i = 0; i < 11; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], 1000.0f + 10 + i);
  EXPECT_FALSE(read_range(root_, c, "nope", Role::kWeight, 0, 1, got.data()).is_ok());
}

TEST_F(Shards, FlippedByteAndCutFileAreNamedWithBothChecksums) {
  const Checkpoint c = checkpoint(4, 2);
  const std::string file = root_ + "/" + c.pieces[1].file;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(c.pieces[1].offset + 2));
    f.put('\x7f');
  }
  Status s = verify_checkpoint(root_, c);
  ASSERT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find(file), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(fmt::format("expected CRC-32C {:08x}", c.pieces[1].crc32c)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("actual"), std::string::npos);
  // Cut rank 0's file inside its last piece: that piece is reported truncated.
  const PieceRecord& last = c.pieces[c.pieces.size() / 2 - 1];
  ASSERT_EQ(last.file, c.pieces[1].file);
  fs::resize_file(file, last.offset + 2);
  Status t = verify_piece(root_, last);
  EXPECT_NE(t.message().find("truncated"), std::string::npos) << t.message();
  EXPECT_EQ(t.code(), StatusCode::kCorruption);
}

TEST_F(Shards, StoreCommitsDropsWhatItIsToldAndRemovesFolders) {
  RunMeta meta{"test", "crc32c:1", "dp2"};
  {
    Result<std::unique_ptr<StateStore>> st = StateStore::open(root_);
    ASSERT_TRUE(st.is_ok()) << st.status().message();
    // A second writer is refused while the first holds the store: a usage error (exit 2),
    // since no restart cures two runs on one checkpoint folder.
    Status second = StateStore::open(root_).status();
    EXPECT_EQ(second.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(second.message().find("in use by another partrain run"), std::string::npos) << second.message();
    for (int64_t step : {2, 4, 6}) {
      const std::vector<int64_t> drop = step == 6 ? std::vector<int64_t>{2} : std::vector<int64_t>{};
      ASSERT_TRUE((*st)->commit(checkpoint(step, 2), meta, drop).is_ok());
    }
    EXPECT_EQ(*(*st)->latest(), 6);
    // Re-committing an older step keeps the newest pointer on 6.
    ASSERT_TRUE((*st)->commit(checkpoint(4, 2), meta, {}).is_ok());
    EXPECT_EQ(*(*st)->latest(), 6);
  }
  checkpoint(8, 2);  // written, never committed (a crash before the commit)
  Result<std::unique_ptr<StateStore>> st = StateStore::open(root_, /*read_only=*/true);
  ASSERT_TRUE(st.is_ok()) << st.status().message();
  Result<std::vector<Checkpoint>> have = (*st)->checkpoints();
  ASSERT_TRUE(have.is_ok());
  ASSERT_EQ(have->size(), 2u);
  EXPECT_EQ((*have)[0].state.step, 6);
  EXPECT_EQ((*have)[1].state.step, 4);
  EXPECT_EQ((*(*st)->meta())->config_hash, "crc32c:1");
  st->reset();
  EXPECT_EQ(*list_step_folders(root_), (std::vector<int64_t>{2, 4, 6, 8}));
  std::ofstream(root_ + "/" + step_folder(6) + "/rank-00000.bin.tmp.77") << "half";
  EXPECT_EQ(remove_temp_files(root_, 6)->size(), 1u);
  ASSERT_TRUE(remove_step(root_, 8).is_ok());
  EXPECT_FALSE(fs::exists(root_ + "/" + step_folder(8)));
  EXPECT_TRUE(fs::exists(root_ + "/" + step_folder(6) + "/rank-00000.bin"));
}

TEST_F(Shards, CoordinatorSkipsADamagedNewestCheckpoint) {
  CoordinatorOptions o;
  o.root = root_;
  o.keep = 3;
  o.tensors = tensors();
  o.meta = {"test", "crc32c:1", ""};
  {
    Result<std::unique_ptr<Coordinator>> c = Coordinator::open(o);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    ASSERT_TRUE((*c)->commit(checkpoint(2, 2)).is_ok());
    Checkpoint four = checkpoint(4, 1);
    ASSERT_TRUE((*c)->commit(four).is_ok());
    Checkpoint partial = checkpoint(6, 2);
    partial.pieces.pop_back();
    EXPECT_FALSE((*c)->commit(partial).is_ok());  // incomplete: never committed
    fs::resize_file(root_ + "/" + four.pieces[0].file, 3);
  }
  Result<std::unique_ptr<Coordinator>> c = Coordinator::open(o);
  ASSERT_TRUE(c.is_ok());
  Result<std::optional<Checkpoint>> r = (*c)->resume_point();
  ASSERT_TRUE(r.is_ok());
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->state.step, 2);
  EXPECT_FALSE(fs::exists(root_ + "/" + step_folder(6)));  // the incomplete save's files
  // Another model's run folder is refused.
  c->reset();
  o.meta.config_hash = "crc32c:2";
  EXPECT_EQ(Coordinator::open(o).status().code(), StatusCode::kInvalidArgument);
}

// Issue 31, item 22: what a resume compares (store/run_inputs.h). A file's digest is its
// absolute path, size and the CRC-32C of its content (the whole of a small file, published
// vectors above); a large one is read in eight 1 MiB blocks spread over it, the first and
// last included, so a change there is seen; the keys that differ are named old -> new.
TEST(RunInputs, NamesEveryChangedKeyAndSeesTheDataChange) {
  // A folder of its own: two test trees run at once on one machine must not share it.
  const partrain::testing::ScratchDir scratch("partrain_run_inputs");
  const std::string dir = fs::canonical(scratch.path()).string();
  std::ofstream(dir + "/small.bin") << "123456789";
  EXPECT_EQ(file_digest(dir + "/small.bin"), dir + "/small.bin (9 bytes, crc32c:e3069283)");
  const std::string big = dir + "/big.bin";
  std::vector<char> bytes(20u << 20, 'x');
  std::ofstream(big, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const std::string before = file_digest(big);
  EXPECT_NE(before.find("(20971520 bytes, crc32c:"), std::string::npos) << before;
  for (const size_t at : {size_t{0}, bytes.size() - 1}) {
    std::fstream f(big, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put('y');
    f.close();
    EXPECT_NE(file_digest(big), before) << "byte " << at;
  }
  EXPECT_EQ(file_digest(dir + "/missing.bin").find(dir + "/missing.bin (unreadable: "), 0u);

  engine::ModelOptions m;
  engine::TrainOptions t;
  engine::DataOptions d;
  d.train_files = {dir + "/small.bin"};
  const std::string was = run_inputs(m, t, d);
  EXPECT_TRUE(changed_inputs(was, run_inputs(m, t, d)).empty());
  m.heads = 8;
  m.norm_eps = 1e-6f;
  m.recompute = engine::Recompute::kFull;  // memory, not results: never compared
  t.lr = 1e-2f;                            // may change across a resume
  d.train_files = {big};
  const std::vector<std::string> changed = changed_inputs(was, run_inputs(m, t, d));
  ASSERT_EQ(changed.size(), 3u) << fmt::format("{}", fmt::join(changed, " | "));
  EXPECT_EQ(changed[0], "model.heads: 4 -> 8");
  EXPECT_EQ(changed[1], "model.norm_eps: 1e-05 -> 1e-06");
  EXPECT_EQ(changed[2].rfind("data.train_files[0]: " + dir + "/small.bin (9 bytes", 0), 0u) << changed[2];
}

}  // namespace
}  // namespace partrain::store
