// The CPU backend with bf16 storage (engine/cpu/cpu_bf16_backend.h): its rounding against
// the IEEE/bfloat16 rule worked by hand, and a training run in it against the same run in
// fp32: the weights and activations are bf16, the master weights fp32, and the loss stays
// within what bf16 rounding of the weights can move it (2e-3 relative over 8 steps of a tiny
// model; bf16 keeps 8 bits of mantissa, a relative step of 2^-8 = 3.9e-3 per weight).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_bf16_backend.h"
#include "engine/train/trainer.h"

namespace partrain::engine {
namespace {

float bits(uint32_t u) {
  float x = 0;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

TEST(Bf16Storage, RoundsToNearestEven) {
  EXPECT_EQ(cpu::to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(cpu::to_bf16(-2.0f), 0xC000);
  // 1 + 2^-8 is half way between 1 (mantissa ...0) and 1 + 2^-7 (...1): to the even one.
  EXPECT_EQ(cpu::to_bf16(bits(0x3F808000)), 0x3F80);
  // 1 + 3 * 2^-8 is half way between 1 + 2^-7 (...1) and 1 + 2^-6 (...0): up, to even.
  EXPECT_EQ(cpu::to_bf16(bits(0x3F818000)), 0x3F82);
  EXPECT_EQ(cpu::to_bf16(bits(0x3F808001)), 0x3F81);  // just above half way: up
  EXPECT_TRUE(std::isnan(cpu::from_bf16(cpu::to_bf16(std::nanf("")))));
  for (float x : {0.0f, 1.0f, -3.5f, 65280.0f, bits(0x0D800000)}) EXPECT_EQ(cpu::from_bf16(cpu::to_bf16(x)), x) << x;
}

// Views of one allocation see each other's writes inside one op (an op in place).
TEST(Bf16Storage, AnOpInPlaceOnASliceWritesOnce) {
  std::unique_ptr<Backend> be = make_cpu_bf16_backend();
  Result<Tensor> t = be->alloc(MemCategory::kActivations, DType::kBF16, Shape{8});
  ASSERT_TRUE(t);
  const std::vector<float> in = {1, 2, 3, 4, 5, 6, 7, 8};
  be->to_device(*t, in.data());
  be->scale(t->slice(4, Shape{4}), 2.0f);
  be->accumulate(t->slice(0, Shape{4}), t->slice(4, Shape{4}));  // [1..4] += [10, 12, 14, 16]
  std::vector<float> out(8);
  be->to_host(out.data(), *t);
  EXPECT_EQ(out, (std::vector<float>{11, 14, 17, 20, 10, 12, 14, 16}));
  be->release(&*t);
}

std::string write_shard(const std::string& name, int tokens) {
  const std::string path = testing::TempDir() + "/" + name;
  std::vector<uint16_t> t(static_cast<size_t>(tokens));
  for (int i = 0; i < tokens; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>((i * 7 + i / 13) % 23);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.data()),
                                             static_cast<std::streamsize>(t.size() * 2));
  return path;
}

TEST(Bf16Storage, TrainsWithinBf16RoundingOfFp32) {
  const std::string shard = write_shard("bf16.bin", 4000);
  std::vector<double> loss[2];
  for (int mode = 0; mode < 2; ++mode) {
    train::RunOptions o;
    o.model.vocab_size = 23;
    o.model.seq_len = 8;
    o.model.layers = 2;
    o.model.hidden = 32;
    o.model.heads = 2;
    o.train.steps = 8;
    o.train.global_batch = 4;
    o.train.micro_batch = 2;
    o.train.lr = 1e-2f;
    o.train.warmup_steps = 2;
    o.data.train_files = {shard};
    o.data.format = "raw-u16";
    o.quiet = true;
    o.precision = mode == 0 ? "fp32" : "bf16";
    auto t = train::Trainer::create(o);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    if (mode == 1) {
      EXPECT_EQ((*t)->model().params().dtype, DType::kBF16);
      EXPECT_FALSE((*t)->optimizer().master().empty());  // the fp32 copy AdamW updates
    }
    for (int s = 0; s < 8; ++s) {
      auto m = (*t)->step();
      ASSERT_TRUE(m.is_ok()) << m.status().message();
      loss[mode].push_back(m->loss);
    }
  }
  for (size_t s = 0; s < loss[0].size(); ++s) {
    EXPECT_LE(std::fabs(loss[1][s] - loss[0][s]), 2e-3 * loss[0][s]) << "step " << s + 1;
    EXPECT_NE(loss[1][s], loss[0][s]) << "step " << s + 1 << ": bf16 storage changed nothing";
  }
  EXPECT_LT(loss[1].back(), loss[1].front());
}

}  // namespace
}  // namespace partrain::engine
