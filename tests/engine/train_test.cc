// Training invariants: the LR schedule's values, AdamW + clipping against hand formulas
// through the Backend, and whole runs: the same run twice gives bit-identical metrics,
// the loss falls on a learnable sequence, gradient accumulation matches one micro-batch, a
// stop request ends the step it was read in.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/train/optimizer.h"
#include "engine/train/trainer.h"

namespace partrain::engine::train {
namespace {

TEST(Schedule, WarmupThenCosineToMinLr) {
  TrainOptions o;
  o.lr = 1e-3f;
  o.min_lr = 1e-4f;
  o.warmup_steps = 4;
  o.steps = 14;
  EXPECT_FLOAT_EQ(lr_at(o, 0), 2.5e-4f);  // (0 + 1) / 4 of the peak
  EXPECT_FLOAT_EQ(lr_at(o, 3), 1e-3f);
  EXPECT_FLOAT_EQ(lr_at(o, 4), 1e-3f);  // cosine starts at the peak
  // Halfway through the decay the cosine is at the midpoint of lr and min_lr.
  EXPECT_NEAR(lr_at(o, 9), 5.5e-4f, 1e-9);
  // progress 1/4: min + (lr - min) * (1 + cos(pi/4)) / 2
  EXPECT_NEAR(lr_at(o, 6), 1e-4 + 9e-4 * (1 + std::cos(3.141592653589793 * 0.2)) / 2, 1e-9);
  EXPECT_NEAR(lr_at(o, 14), 1e-4f, 1e-10);
  EXPECT_NEAR(lr_at(o, 100), 1e-4f, 1e-10);  // clamped past the end
  o.warmup_steps = 0;
  EXPECT_FLOAT_EQ(lr_at(o, 0), 1e-3f);
}

// A learnable token stream: a repeating pattern, as a raw uint16 shard.
std::string write_shard(const std::string& name, int tokens) {
  const std::string path = testing::TempDir() + "/" + name;
  std::vector<uint16_t> t(static_cast<size_t>(tokens));
  for (int i = 0; i < tokens; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>((i * 7 + i / 13) % 23);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()),
                                             static_cast<std::streamsize>(t.size() * 2));
  return path;
}

RunOptions tiny_run(const std::string& shard, const std::string& run_dir) {
  RunOptions o;
  o.model.vocab_size = 23;
  o.model.seq_len = 8;
  o.model.layers = 2;
  o.model.hidden = 16;
  o.model.heads = 2;
  o.model.dropout = 0.1f;
  o.train.steps = 6;
  o.train.global_batch = 4;
  o.train.micro_batch = 2;
  o.train.lr = 1e-2f;
  o.train.min_lr = 1e-3f;
  o.train.warmup_steps = 2;
  o.data.train_files = {shard};
  o.data.format = "raw-u16";
  o.run_dir = run_dir;
  o.quiet = true;
  return o;
}

std::vector<std::string> metric_lines(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    // Drop the timings (the only fields allowed to differ between two runs).
    lines.push_back(l.substr(0, l.find(",\"step_ms\"")));
  }
  return lines;
}

TEST(Trainer, SameRunTwiceGivesBitIdenticalMetrics) {
  const std::string shard = write_shard("det.bin", 4000);
  const std::string a = testing::TempDir() + "/run_a", b = testing::TempDir() + "/run_b";
  for (const std::string& dir : {a, b}) {
    std::filesystem::remove_all(dir);  // a fresh run: metrics.jsonl is only ever appended to
    RunOptions o = tiny_run(shard, dir);
    o.model.moe_experts = 2;  // routing included
    auto t = Trainer::create(o);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    ASSERT_TRUE((*t)->run().is_ok());
  }
  const auto la = metric_lines(a), lb = metric_lines(b);
  ASSERT_EQ(la.size(), 6u);
  EXPECT_EQ(la, lb);
  EXPECT_NE(la[0].find("\"loss\":"), std::string::npos);
  EXPECT_NE(la[5].find("\"tokens\":192"), std::string::npos);  // 6 steps x 4 x 8
}

TEST(Trainer, LossFallsOnALearnableStream) {
  const std::string shard = write_shard("learn.bin", 4000);
  RunOptions o = tiny_run(shard, "");
  o.model.dropout = 0.0f;
  o.train.steps = 30;
  auto t = Trainer::create(o);
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    auto m = (*t)->step();
    ASSERT_TRUE(m.is_ok());
    if (s == 0) first = m->loss;
    last = m->loss;
  }
  EXPECT_NEAR(first, std::log(23.0), 0.2);
  EXPECT_LT(last, first - 1.0);
}

TEST(Trainer, GradAccumulationMatchesOneMicroBatch) {
  // 2 micro-batches of 2 vs 1 of 4: same weights after each step (to fp32 rounding).
  const std::string shard = write_shard("accum.bin", 4000);
  RunOptions a = tiny_run(shard, ""), b = tiny_run(shard, "");
  b.train.micro_batch = 4;
  auto ta = Trainer::create(a), tb = Trainer::create(b);
  ASSERT_TRUE(ta.is_ok() && tb.is_ok());
  EXPECT_EQ((*ta)->grad_accum(), 2);
  EXPECT_EQ((*tb)->grad_accum(), 1);
  for (int s = 0; s < 3; ++s) {
    auto ma = (*ta)->step(), mb = (*tb)->step();
    ASSERT_TRUE(ma.is_ok() && mb.is_ok());
    EXPECT_NEAR(ma->loss, mb->loss, 1e-6 * mb->loss);
    EXPECT_NEAR(ma->grad_norm, mb->grad_norm, 1e-5 * mb->grad_norm);
  }
  const auto pa = (*ta)->model().params_to_host(), pb = (*tb)->model().params_to_host();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    diff += (static_cast<double>(pa[i]) - pb[i]) * (static_cast<double>(pa[i]) - pb[i]);
    norm += static_cast<double>(pb[i]) * pb[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
}

// A stop request (SIGTERM's flag) is read once per step: set before a step, the run stops
// at that step's end with the retryable status; set during the last step, the run ends
// normally and says why the request changed nothing.
TEST(Trainer, AStopRequestEndsTheStepOrLetsTheLastOneFinish) {
  const std::string shard = write_shard("stop.bin", 4000);
  const std::atomic<bool> stop{true};
  const std::string dir = testing::TempDir() + "/run_stop";
  std::filesystem::remove_all(dir);
  RunOptions o = tiny_run(shard, dir);
  o.stop = &stop;
  auto early = Trainer::create(o);
  ASSERT_TRUE(early.is_ok()) << early.status().message();
  const Status s = (*early)->run();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.message();
  EXPECT_NE(s.message().find("stopped at step 1"), std::string::npos) << s.message();
  EXPECT_EQ(metric_lines(dir).size(), 1u);

  o.run_dir.clear();
  o.train.steps = 1;
  auto last = Trainer::create(o);
  ASSERT_TRUE(last.is_ok()) << last.status().message();
  testing::internal::CaptureStderr();
  const Status l = (*last)->run();
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(l.is_ok()) << l.message();
  EXPECT_NE(log.find("stop requested during the last step: the run ends normally at step 1"), std::string::npos)
      << log;
}

TEST(Trainer, RejectsABatchThatDoesNotDivide) {
  const std::string shard = write_shard("bad.bin", 1000);
  RunOptions o = tiny_run(shard, "");
  o.train.global_batch = 5;
  auto t = Trainer::create(o);
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("global_batch"), std::string::npos);
}

TEST(AdamW, ClipsByTheGlobalNormAndSkipsDecayOnNorms) {
  auto be = make_cpu_backend();
  ModelOptions mo;
  mo.vocab_size = 5;
  mo.seq_len = 2;
  mo.layers = 1;
  mo.hidden = 4;
  mo.heads = 1;
  auto m = model::Model::create(mo, be.get(), 1, 1);
  ASSERT_TRUE(m.is_ok());
  TrainOptions to;
  to.grad_clip = 1.0f;
  to.weight_decay = 0.5f;
  auto opt = AdamW::create(m->get(), to);
  ASSERT_TRUE(opt.is_ok());
  // Gradient of all 2s: norm 2 sqrt(n) > 1, so the clip scale is 1 / (norm + 1e-6).
  const int64_t n = (*m)->num_params();
  std::vector<float> g(static_cast<size_t>(n), 2.0f);
  be->to_device((*m)->grads(), g.data());
  const auto before = (*m)->params_to_host();
  const OptimizerStepStats st = (*opt)->step(0.1f);
  EXPECT_NEAR(st.grad_norm, 2.0 * std::sqrt(static_cast<double>(n)), 1e-3);
  EXPECT_NEAR(st.clip_scale, 1.0 / (st.grad_norm + 1e-6), 1e-9);
  const auto after = (*m)->params_to_host();
  // First Adam step: update = lr * sign(g) (m/sqrt(v) = 1, eps negligible), plus decay.
  for (const auto& p : (*m)->table().specs()) {
    const size_t i = static_cast<size_t>(p.offset);
    const double decay = p.no_decay ? 0.0 : 0.5;
    const double want = before[i] * (1 - 0.1 * decay) - 0.1;
    EXPECT_NEAR(after[i], want, 1e-5) << p.name;
  }
}

}  // namespace
}  // namespace partrain::engine::train
