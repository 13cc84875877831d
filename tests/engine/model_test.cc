// The whole model against central finite differences of its own loss (GPT-2, LLaMA with
// GQA, and MoE variants of both), plus the invariants training relies on: recompute
// modes give bit-identical loss and gradients, gradient accumulation equals one big
// batch, dropout masks follow the logical position, export/import round-trips.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model/hf_io.h"
#include "engine/model/model.h"
#include "tiny_models.h"

namespace partrain::engine::model {
namespace {

using engine::testing::tiny;

struct Data {
  std::vector<int32_t> in, tgt;
};
Data random_data(int B, int T, int V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, V - 1);
  Data x;
  for (int i = 0; i < B * T; ++i) x.in.push_back(d(gen)), x.tgt.push_back(d(gen));
  return x;
}

struct Harness {
  std::unique_ptr<Backend> be = make_cpu_backend();
  std::unique_ptr<Model> m;
  Harness(const ModelOptions& o, int B) {
    auto r = Model::create(o, be.get(), B, 42);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    m = std::move(r).value();
  }
  float loss(const Data& d, int B, int64_t step = 0) {
    MicroBatch mb{d.in.data(), d.tgt.data(), B, 0, step};
    auto r = m->forward(mb);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r->loss;
  }
  std::vector<float> grads_host() {
    std::vector<float> g(static_cast<size_t>(m->num_params()));
    be->to_host(g.data(), m->grads());
    return g;
  }
};

// Analytic gradients vs central differences for the largest-gradient element and one
// random element of every parameter tensor.
void check_model_fd(const ModelOptions& o) {
  // Hundreds of forward passes of a model this small are fastest on one thread (no
  // barriers to wait on when the machine is busy); the other tests run multi-threaded.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const int B = 2;
  Harness h(o, B);
  Data d = random_data(B, o.seq_len, o.vocab_size, 7);
  d.tgt[1] = -1;  // an ignored position: no loss, no gradient, not counted in the mean
  h.m->zero_grads();
  h.loss(d, B);
  h.m->backward(1.0f);
  const std::vector<float> g = h.grads_host();
  std::vector<float> p = h.m->params_to_host();
  std::mt19937 gen(3);
  const double eps = 1e-2;
  int checked = 0;
  for (const ParamSpec& s : h.m->table().specs()) {
    const int64_t n = s.numel();
    int64_t best = 0;
    for (int64_t j = 1; j < n; ++j)
      if (std::fabs(g[s.offset + j]) > std::fabs(g[s.offset + best])) best = j;
    for (int64_t j : {best, static_cast<int64_t>(gen() % static_cast<uint32_t>(n))}) {
      const size_t at = static_cast<size_t>(s.offset + j);
      const float orig = p[at];
      p[at] = orig + static_cast<float>(eps);
      h.m->params_from_host(p);
      const double up = h.loss(d, B);
      p[at] = orig - static_cast<float>(eps);
      h.m->params_from_host(p);
      const double down = h.loss(d, B);
      p[at] = orig;
      h.m->params_from_host(p);
      const double fd = (up - down) / (2 * eps);
      EXPECT_NEAR(g[at], fd, 2e-4 + 2e-2 * std::fabs(fd)) << s.name << "[" << j << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
  omp_set_num_threads(threads);
}

TEST(ModelFd, Gpt2) { check_model_fd(tiny(Arch::kGpt2)); }

TEST(ModelFd, Gpt2WithDropout) {
  ModelOptions o = tiny(Arch::kGpt2);
  o.dropout = 0.2f;  // masks depend only on (seed, step, position): FD stays valid
  check_model_fd(o);
}

TEST(ModelFd, LlamaGqaUntied) { check_model_fd(tiny(Arch::kLlama)); }

TEST(ModelFd, LlamaMoeTop2) {
  ModelOptions o = tiny(Arch::kLlama);
  o.moe_experts = 4;
  o.moe_top_k = 2;
  o.moe_every = 2;  // block 1 only
  o.moe_capacity_factor = 4.0f;
  o.moe_aux_loss_coef = 0.1f;
  check_model_fd(o);
}

TEST(ModelFd, Gpt2MoeTop1WithTokenDropping) {
  ModelOptions o = tiny(Arch::kGpt2);
  o.moe_experts = 3;
  o.moe_top_k = 1;
  o.moe_capacity_factor = 0.75f;  // fewer slots than tokens: some are dropped
  o.moe_aux_loss_coef = 0.1f;
  check_model_fd(o);
}

TEST(Model, InitialLossIsNearLogVocab) {
  ModelOptions o = tiny(Arch::kGpt2);
  o.init_std = 0.02f;
  Harness h(o, 2);
  const Data d = random_data(2, o.seq_len, o.vocab_size, 8);
  EXPECT_NEAR(h.loss(d, 2), std::log(static_cast<double>(o.vocab_size)), 0.05);
}

TEST(Model, IgnoredTargetsDoNotCount) {
  ModelOptions o = tiny(Arch::kGpt2);
  Harness h(o, 1);
  Data d = random_data(1, o.seq_len, o.vocab_size, 12);
  const float full = h.loss(d, 1);
  // Ignoring every position but the first gives the first position's loss alone; the
  // mean of the per-position losses (each alone) is the full loss.
  double mean = 0;
  for (int keep = 0; keep < o.seq_len; ++keep) {
    Data one = d;
    for (int t = 0; t < o.seq_len; ++t)
      if (t != keep) one.tgt[static_cast<size_t>(t)] = -1;
    mean += h.loss(one, 1) / o.seq_len;
  }
  EXPECT_NEAR(mean, full, 1e-6 * full);
  for (int32_t& t : d.tgt) t = -1;
  EXPECT_EQ(h.loss(d, 1), 0.0f);
}

TEST(Model, InitDependsOnlyOnSeedNameAndIndex) {
  // The same tensor in a 2-layer and a 3-layer model gets the same values.
  ModelOptions a = tiny(Arch::kLlama), b = a;
  b.layers = 3;
  Harness ha(a, 1), hb(b, 1);
  const auto pa = ha.m->params_to_host(), pb = hb.m->params_to_host();
  const std::string name = "model.layers.1.self_attn.k_proj.weight";
  const ParamSpec& sa = ha.m->table().specs()[static_cast<size_t>(ha.m->table().find(name))];
  const ParamSpec& sb = hb.m->table().specs()[static_cast<size_t>(hb.m->table().find(name))];
  ASSERT_EQ(sa.numel(), sb.numel());
  for (int64_t j = 0; j < sa.numel(); ++j) ASSERT_EQ(pa[sa.offset + j], pb[sb.offset + j]);
}

// Loss and gradients of one micro-batch under each recompute mode.
struct LossGrads {
  float loss;
  std::vector<float> grads;
};
LossGrads run_once(ModelOptions o, Recompute r) {
  o.recompute = r;
  Harness h(o, 2);
  const Data d = random_data(2, o.seq_len, o.vocab_size, 9);
  h.m->zero_grads();
  const float l = h.loss(d, 2, 5);
  h.m->backward(1.0f);
  return {l, h.grads_host()};
}

TEST(Model, RecomputeModesAreBitIdentical) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelOptions o = tiny(arch);
    o.dropout = 0.1f;
    o.moe_experts = 2;
    o.moe_every = 2;
    const LossGrads none = run_once(o, Recompute::kNone);
    for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
      const LossGrads other = run_once(o, r);
      EXPECT_EQ(none.loss, other.loss);
      ASSERT_EQ(none.grads.size(), other.grads.size());
      EXPECT_TRUE(none.grads == other.grads) << "recompute mode " << static_cast<int>(r);
    }
  }
}

TEST(Model, RecomputeUsesLessActivationMemory) {
  ModelOptions o = tiny(Arch::kGpt2);
  o.layers = 4;
  size_t peak[3];
  int i = 0;
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    o.recompute = r;
    Harness h(o, 4);
    peak[i++] = h.be->memory().peak[static_cast<size_t>(MemCategory::kActivations)];
  }
  EXPECT_LT(peak[1], peak[0]);
  EXPECT_LT(peak[2], peak[1]);
}

TEST(Model, GradAccumulationEqualsOneBigBatch) {
  ModelOptions o = tiny(Arch::kLlama);
  o.dropout = 0.1f;
  const int B = 8;
  const Data d = random_data(B, o.seq_len, o.vocab_size, 10);
  Harness big(o, B), small(o, B / 2);
  big.m->zero_grads();
  MicroBatch all{d.in.data(), d.tgt.data(), B, 0, 3};
  const float loss_big = big.m->forward(all)->loss;
  big.m->backward(1.0f);
  small.m->zero_grads();
  double loss_small = 0;
  for (int k = 0; k < 2; ++k) {
    const size_t off = static_cast<size_t>(k) * (B / 2) * o.seq_len;
    MicroBatch half{d.in.data() + off, d.tgt.data() + off, B / 2,
                    static_cast<uint64_t>(k * (B / 2)), 3};
    loss_small += small.m->forward(half)->loss / 2;
    small.m->backward(0.5f);
  }
  EXPECT_NEAR(loss_big, loss_small, 1e-6 * loss_big);
  const auto ga = big.grads_host(), gb = small.grads_host();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    diff += (static_cast<double>(ga[i]) - gb[i]) * (static_cast<double>(ga[i]) - gb[i]);
    norm += static_cast<double>(ga[i]) * ga[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-6);
}

TEST(Model, DropoutChangesWithStepAndIsOffAtZero) {
  ModelOptions o = tiny(Arch::kGpt2);
  const Data d = random_data(2, o.seq_len, o.vocab_size, 11);
  Harness plain(o, 2);
  o.dropout = 0.3f;
  Harness drop(o, 2);
  const float l0 = drop.loss(d, 2, 0), l0b = drop.loss(d, 2, 0), l1 = drop.loss(d, 2, 1);
  EXPECT_EQ(l0, l0b);
  EXPECT_NE(l0, l1);
  EXPECT_NE(l0, plain.loss(d, 2, 0));
}

TEST(Model, ExportImportRoundTripsWithHuggingFaceNames) {
  const std::string dir = ::testing::TempDir();
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    ModelOptions o = tiny(arch);
    Harness a(o, 1);
    const std::string path = dir + "/roundtrip.safetensors";
    ASSERT_TRUE(save_hf(*a.m, path).is_ok());
    auto file = io::read_safetensors(path);
    ASSERT_TRUE(file.is_ok());
    if (arch == Arch::kGpt2) {
      const io::SafeTensor* t = file->find("h.0.attn.c_attn.weight");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->shape, (std::vector<int64_t>{16, 48}));  // Conv1D: [in, out]
      EXPECT_EQ(file->find("lm_head.weight"), nullptr);      // tied
    } else {
      const io::SafeTensor* t = file->find("model.layers.0.self_attn.k_proj.weight");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->shape, (std::vector<int64_t>{8, 16}));  // GQA: 2 kv heads of 4
      EXPECT_NE(file->find("lm_head.weight"), nullptr);
    }
    o.init_std = 0.05f;  // different init, then load
    Harness b(o, 1);
    ASSERT_TRUE(load_hf(*b.m, path).is_ok());
    EXPECT_TRUE(a.m->params_to_host() == b.m->params_to_host());
    std::filesystem::remove(path);
  }
}

TEST(Model, RejectsBadOptionsWithAReason) {
  auto be = make_cpu_backend();
  ModelOptions o = tiny(Arch::kGpt2);
  o.heads = 5;
  auto r = Model::create(o, be.get(), 1, 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("heads"), std::string::npos);
}

}  // namespace
// The data-parallel sync hands each block's gradient range over as soon as backward leaves
// the block: the range must hold exactly the tensors named after that block, and the
// callback must come once per range: the final norm and head (l = L), then the blocks
// top down.
TEST(Model, BlockParamRangesHoldExactlyEachBlocksTensors) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    for (int experts : {0, 2}) {
      ModelOptions o = tiny(arch);
      o.layers = 3;
      o.moe_experts = experts;
      o.moe_top_k = 1;
      Harness h(o, 2);
      for (int l = 0; l < o.layers; ++l) {
        const auto [lo, hi] = h.m->block_param_range(l);
        const std::string prefix =
            (arch == Arch::kGpt2 ? "h." : "model.layers.") + std::to_string(l) + ".";
        int64_t named = 0;
        for (const auto& s : h.m->table().specs()) {
          const bool in_range = s.offset >= lo && s.offset < hi;
          EXPECT_EQ(in_range, s.name.rfind(prefix, 0) == 0) << s.name << " block " << l;
          if (in_range) named += s.numel();
        }
        EXPECT_EQ(named, hi - lo) << "block " << l;
      }
      Data d = random_data(2, o.seq_len, o.vocab_size, 5);
      h.loss(d, 2);
      std::vector<int> order;
      h.m->backward(1.0f, [&](int l) { order.push_back(l); });
      EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
      const auto [top_lo, top_hi] = h.m->block_param_range(o.layers);
      EXPECT_EQ(top_lo, h.m->block_param_range(o.layers - 1).second);
      EXPECT_EQ(top_hi, h.m->num_params());
    }
  }
}

}  // namespace partrain::engine::model
