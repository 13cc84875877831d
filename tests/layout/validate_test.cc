// Every layout invariant of DESIGN.md, each with the exact message that says what to change.
#include "layout/validate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace partrain {
namespace {

ParallelSpec parse(const char* text) {
  Result<ParallelSpec> s = parse_spec(text);
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return *s;
}

ClusterFacts cluster(int world, int gpus_per_node, int nvlink_domain = 0) {
  ClusterFacts c;
  c.world = world;
  c.gpus_per_node = gpus_per_node;
  c.nvlink_domain = nvlink_domain;
  return c;
}

ModelShape gpt(int hidden, int heads, int layers) {
  ModelShape m;
  m.hidden = hidden;
  m.heads = heads;
  m.layers = layers;
  return m;
}

BatchShape batch(int64_t global, int64_t micro) {
  BatchShape b;
  b.global_batch = global;
  b.micro_batch = micro;
  return b;
}

TEST(ValidateTest, TheSixtyFourGpuExampleIsValid) {
  ModelShape m = gpt(4096, 32, 32);
  m.kv_heads = 8;
  m.seq_len = 2048;
  EXPECT_TRUE(validate(parse("tp4,pp2"), cluster(64, 8), m, batch(512, 2)).is_ok());
  EXPECT_TRUE(validate_all(parse("tp4,pp2"), cluster(64, 8), m, batch(512, 2)).empty());
  Result<int> ga = derive_grad_accum(batch(512, 2), 8);
  ASSERT_TRUE(ga.is_ok());
  EXPECT_EQ(*ga, 32);  // 512 / (2 * 8)
}

TEST(ValidateTest, EachInvariantHasItsMessage) {
  struct Case {
    const char* spec;
    ClusterFacts cluster;
    ModelShape model;
    BatchShape batch;
    const char* message;
  };
  ModelShape moe = gpt(1024, 16, 8);
  moe.experts = 6;
  ModelShape dense = gpt(1024, 16, 8);
  dense.experts = 0;
  ModelShape gqa = gpt(1024, 16, 8);
  gqa.kv_heads = 2;
  ModelShape odd_seq = gpt(1024, 16, 8);
  odd_seq.seq_len = 1030;
  const Case cases[] = {
      {"tp4,pp2", cluster(12, 4), {}, {},
       "partrain: world size 12 is not a multiple of tp4 x pp2 = 8; use a multiple of 8 ranks "
       "or smaller tp/pp"},
      {"tp2,cp2,pp2", cluster(12, 4), {}, {},
       "partrain: world size 12 is not a multiple of tp2 x cp2 x pp2 = 8; use a multiple of 8 "
       "ranks or smaller tp/cp/pp"},
      {"tp2,dp3", cluster(8, 4), {}, {},
       "partrain: tp2 x pp1 x dp3 = 6 ranks, but the job has 8; drop dp3 to derive dp4 from "
       "the world size"},
      {"tp3", cluster(12, 4), {}, {},
       "partrain: tp3 does not divide 4 GPUs per node; use a tp that divides 4 (1, 2, 4)"},
      {"tp3", cluster(24, 8, 4), {}, {},
       "partrain: tp3 does not divide the NVLink domain of 4 GPUs; use a tp that divides 4 "
       "(1, 2, 4)"},
      {"tp16", cluster(32, 8), {}, {},
       "partrain: tp16 is larger than 8 GPUs per node; tensor parallelism needs NVLink, so "
       "use tp8 or less and add pp to split the model further"},
      {"tp8", cluster(32, 8, 4), {}, {},
       "partrain: tp8 is larger than the NVLink domain of 4 GPUs; tensor parallelism needs "
       "NVLink, so use tp4 or less and add pp to split the model further"},
      {"tp4", cluster(8, 8), gpt(1022, 12, 8), {},
       "partrain: tp4 does not divide the model's 1022 hidden size; use a tp from 1, 2, 7, 14, "
       "73, 146, 511, 1022"},
      {"tp8", cluster(8, 8), gpt(1024, 12, 8), {},
       "partrain: tp8 does not divide the model's 12 attention heads; use a tp from 1, 2, 3, "
       "4, 6, 12"},
      {"tp4", cluster(8, 8), gqa, {},
       "partrain: tp4 does not divide the model's 2 key/value heads; use a tp from 1, 2"},
      {"tp4", cluster(8, 8), odd_seq, {},
       "partrain: sequence parallelism splits seq_len 1030 over tp4, which does not divide "
       "it; use a seq_len that is a multiple of 4, or nosp"},
      {"pp3", cluster(3, 1), gpt(1024, 16, 2), {},
       "partrain: 2 layers cannot fill pp3 = 3 model chunks (each holds at least one block); "
       "use at most 2 chunks, or add layers"},
      {"pp2,sched=interleaved:3", cluster(2, 1), gpt(1024, 16, 5), {},
       "partrain: 5 layers cannot fill pp2 x 3 virtual stages = 6 model chunks (each holds at "
       "least one block); use at most 5 chunks, or add layers"},
      {"ep4", cluster(8, 8), moe, {},
       "partrain: ep4 does not divide the model's 6 experts; use an ep from 1, 2, 3, 6"},
      {"ep2", cluster(8, 8), dense, {},
       "partrain: ep2 shards experts, but the model has none; drop ep2 or give the model "
       "experts"},
      {"ep3", cluster(8, 8), {}, {},
       "partrain: ep3 does not divide dp8 (experts are sharded inside each data-parallel "
       "group); use an ep that divides 8"},
      {"tp2", cluster(8, 8), {}, batch(100, 4),
       "partrain: global_batch 100 is not a multiple of micro_batch 4 x dp4 = 16, so "
       "grad_accum is not whole; use a global_batch of 96 or 112"},
      {"tp2", cluster(8, 8), {}, batch(8, 4),
       "partrain: global_batch 8 is not a multiple of micro_batch 4 x dp4 = 16, so grad_accum "
       "is not whole; use a global_batch of 16"},
      {"tp2,mb=5", cluster(8, 8), {}, batch(128, 4),
       "partrain: global_batch 128 does not split into mb=5 micro-batches on each of dp4 (5 x 4 = 20 "
       "does not divide it); use mb=4 or mb=8, or drop mb= to derive the count"},
      {"tp2,mb=4", cluster(8, 8), {}, batch(100, 4),
       "partrain: global_batch 100 does not split into mb=4 micro-batches on each of dp4 (4 x 4 = 16 "
       "does not divide it); use mb=1 or mb=5, or drop mb= to derive the count"},
      {"tp2,mb=4", cluster(8, 8), {}, batch(102, 4),
       "partrain: global_batch 102 does not split into mb=4 micro-batches on each of dp4 (4 x 4 = 16 "
       "does not divide it); set global_batch to a multiple of 16, or drop mb= to derive the count"},
      {"tp2,pp4", cluster(16, 8), {}, batch(8, 2),
       "partrain: sched=1f1b with pp4 needs at least 4 micro-batches per step, but there are "
       "2; raise global_batch or lower micro_batch (or set mb=4), or use sched=gpipe"},
      {"pp4,sched=interleaved:2", cluster(8, 8), {}, batch(12, 1),
       "partrain: sched=interleaved:2 needs the micro-batch count (6) to be a multiple of pp4; "
       "change global_batch or micro_batch accordingly"},
      {"pp4,sched=interleaved:2", cluster(4, 4), {}, batch(24, 4),
       "partrain: sched=interleaved:2 needs the micro-batch count (6) to be a multiple of pp4; "
       "set mb=4, or change global_batch or micro_batch accordingly"},
      {"tp2,pp2", cluster(4, 4), {}, batch(8, 8),
       "partrain: sched=1f1b with pp2 needs at least 2 micro-batches per step, but there are "
       "1; raise global_batch or lower micro_batch (or set mb=2), or use sched=gpipe"},
      {"pp4,mb=2", cluster(4, 4), {}, {},
       "partrain: sched=1f1b with pp4 needs at least 4 micro-batches per step, but there are "
       "2; raise global_batch or lower micro_batch (or set mb=4), or use sched=gpipe"},
      {"pp4,mb=3,sched=zbh1", cluster(4, 4), {}, {},
       "partrain: sched=zbh1 with pp4 needs at least 4 micro-batches per step, but there are "
       "3; raise global_batch or lower micro_batch (or set mb=4), or use sched=gpipe"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec);
    Status s = validate(parse(c.spec), c.cluster, c.model, c.batch);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), c.message);
  }
}

// With mb=M the micro-batch is global_batch / (M x dp), as the runtime derives it
// (config's grad_accum_steps): a batch that splits so is valid.
TEST(ValidateTest, MicroBatchCountSplitsTheGlobalBatch) {
  EXPECT_TRUE(validate(parse("tp2,mb=4"), cluster(8, 8), {}, batch(128, 4)).is_ok());
  EXPECT_TRUE(validate(parse("tp2,pp2,mb=2"), cluster(4, 4), {}, batch(8, 8)).is_ok());
}

// Every "set mb=K" or "use mb=K" a refusal suggests is accepted when taken, for every
// small batch, dp and pipeline schedule (the suggestion must work as written).
TEST(ValidateTest, SuggestedMicroBatchCountsWorkWhenTaken) {
  int suggested = 0;
  for (const char* sched : {"1f1b", "interleaved:2", "zbh1"}) {
    for (int pp : {2, 3, 4}) {
      for (int dp : {1, 2, 3}) {
        for (int64_t global = 1; global <= 48; ++global) {
          for (int64_t micro = 1; micro <= 8; ++micro) {
            for (int mb : {0, 1, 5}) {
              std::string spec = "pp" + std::to_string(pp) + ",sched=" + sched;
              if (mb > 0) spec += ",mb=" + std::to_string(mb);
              const ClusterFacts c = cluster(pp * dp, 8);
              Status s = validate(parse(spec.c_str()), c, {}, batch(global, micro));
              const std::string& m = s.message();
              size_t at = m.find("set mb=");
              if (at == std::string::npos) at = m.find("use mb=");
              if (at == std::string::npos) continue;
              const int k = std::stoi(m.substr(at + 7));
              std::string taken = "pp" + std::to_string(pp) + ",sched=" + sched + ",mb=" + std::to_string(k);
              SCOPED_TRACE(spec + " global " + std::to_string(global) + " micro " + std::to_string(micro) +
                           " dp " + std::to_string(dp) + ": " + m);
              const Status t = validate(parse(taken.c_str()), c, {}, batch(global, micro));
              EXPECT_TRUE(t.is_ok()) << t.message();
              EXPECT_EQ(global % (int64_t{k} * dp), 0);  // config's grad_accum_steps accepts it
              ++suggested;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(suggested, 100);
}

TEST(ValidateTest, GpipeAcceptsFewMicroBatches) {
  // GPipe has no 1F1B warm-up constraint; 2 micro-batches on pp4 are slow but legal.
  EXPECT_TRUE(validate(parse("pp4,sched=gpipe"), cluster(16, 8), {}, batch(8, 2)).is_ok());
  EXPECT_TRUE(validate(parse("tp4,nosp"), cluster(8, 8), [] {
                ModelShape m;
                m.seq_len = 1030;
                return m;
              }(), {}).is_ok());
}

TEST(ValidateTest, AllErrorsComeInAFixedOrder) {
  ModelShape m = gpt(1024, 12, 3);
  std::vector<Status> all = validate_all(parse("tp8,pp4"), cluster(24, 4), m, {});
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].message(), "partrain: world size 24 is not a multiple of tp8 x pp4 = 32; "
                              "use a multiple of 32 ranks or smaller tp/pp");
  EXPECT_EQ(all[1].message(), "partrain: tp8 is larger than 4 GPUs per node; tensor "
                              "parallelism needs NVLink, so use tp4 or less and add pp to "
                              "split the model further");
  EXPECT_EQ(all[2].message(), "partrain: tp8 does not divide the model's 12 attention heads; "
                              "use a tp from 1, 2, 3, 4, 6, 12");
  EXPECT_EQ(all[3].message(), "partrain: 3 layers cannot fill pp4 = 4 model chunks (each "
                              "holds at least one block); use at most 3 chunks, or add layers");
  EXPECT_EQ(validate(parse("tp8,pp4"), cluster(24, 4), m).message(), all[0].message());
}

TEST(ValidateTest, DegreesBuiltByHandAreChecked) {
  ParallelSpec s;
  s.tp = 0;
  EXPECT_EQ(validate(s, cluster(8, 8)).message(),
            "partrain: tp0 is not a positive degree; use tp1 or more");
  s.tp = 1;
  s.zero = 5;
  EXPECT_EQ(validate(s, cluster(8, 8)).message(),
            "partrain: zero5 is not a ZeRO stage; use zero0..zero3");
}

// grad=NAME replaces dp's plugin; a ZeRO stage brings its own, so the two are refused together.
TEST(ValidateTest, GradientPluginNeedsZeroZero) {
  EXPECT_TRUE(validate(parse("dp4,grad=onebit"), cluster(4, 0)).is_ok());
  EXPECT_EQ(validate(parse("dp4,zero1,grad=onebit"), cluster(4, 0)).message(),
            "partrain: grad=onebit replaces plain data parallel's gradient average, and zero1 "
            "has a data plugin of its own; drop grad= or use zero0");
}

}  // namespace
}  // namespace partrain
