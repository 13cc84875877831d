// Pipeline stage models (engine/model/stage.h) chained by hand on one process against the
// whole model: the same initial weights by name, the same loss, and the same gradients of
// every tensor (the tied wte as the sum of the first and the last stage's copies), with
// two micro-batches in flight through activation slots, backwarded in reverse order; and
// with the backward split into input and weight gradients (ZB-H1), the weight half later.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model/model.h"
#include "tiny_models.h"

namespace partrain::engine::model {
namespace {

// Four blocks (two per stage), V 23, T 8.
ModelOptions options(Arch arch, float dropout) {
  ModelOptions o = engine::testing::tiny(arch, {.vocab = 23, .seq_len = 8, .layers = 4});
  o.dropout = dropout;
  return o;
}

std::vector<float> host(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.to_host(v.data(), t);
  return v;
}

// split: every backward as backward-input (both micro-batches), then backward-weight (in
// forward order), as ZB-H1 runs them.
void check_stages(const ModelOptions& o, bool split = false) {
  constexpr int B = 2, kMb = 2;
  const int T = o.seq_len, N = B * T;
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> tok(0, o.vocab_size - 1);
  std::vector<std::vector<int32_t>> in(kMb), tgt(kMb);
  for (int k = 0; k < kMb; ++k) {
    for (int i = 0; i < N; ++i) in[k].push_back(tok(gen)), tgt[k].push_back(tok(gen));
  }
  std::unique_ptr<Backend> be = make_cpu_backend();
  // The reference: the whole model, micro-batch after micro-batch.
  auto whole = Model::create(o, be.get(), B, 9);
  ASSERT_TRUE(whole.is_ok()) << whole.status().message();
  Model& w = **whole;
  w.zero_grads();
  std::vector<float> ref_loss;
  for (int k = 0; k < kMb; ++k) {
    auto r = w.forward({in[k].data(), tgt[k].data(), B, static_cast<uint64_t>(k * B), 3});
    ASSERT_TRUE(r.is_ok());
    ref_loss.push_back(r->loss);
    w.backward(1.0f / kMb);
  }
  // Three stages: embedding + block 0, blocks 1-2, block 3 + head; two slots each.
  const std::vector<std::pair<int, int>> ranges = {{0, 1}, {1, 3}, {3, 4}};
  std::vector<std::unique_ptr<Model>> st;
  for (auto [lo, hi] : ranges) {
    auto m = Model::create(o, be.get(), B, 9, {}, {}, {}, StageOptions{lo, hi, kMb, split});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    st.push_back(std::move(m).value());
    st.back()->zero_grads();
  }
  EXPECT_TRUE(st[0]->first_stage() && !st[0]->last_stage());
  EXPECT_TRUE(!st[2]->first_stage() && st[2]->last_stage());
  // Every stage tensor starts as the whole model's tensor of the same name.
  for (const auto& m : st) {
    for (size_t i = 0; i < m->table().specs().size(); ++i) {
      const int j = w.table().find(m->table().specs()[i].name);
      ASSERT_GE(j, 0) << m->table().specs()[i].name;
      EXPECT_EQ(host(*be, m->param(static_cast<int>(i))), host(*be, w.param(j))) << m->table().specs()[i].name;
    }
  }
  // Both micro-batches forward through the stages, then backward in reverse order.
  for (int k = 0; k < kMb; ++k) {
    const MicroBatch mb{in[k].data(), tgt[k].data(), B, static_cast<uint64_t>(k * B), 3};
    for (size_t s = 0; s < st.size(); ++s) {
      if (s > 0) be->copy(st[s]->stage_input(k), st[s - 1]->stage_output(k));
      auto r = st[s]->forward(mb, k);
      ASSERT_TRUE(r.is_ok()) << r.status().message();
      if (s + 1 == st.size()) {
        EXPECT_EQ(r->loss, ref_loss[static_cast<size_t>(k)]) << k;
      }
    }
  }
  Result<Tensor> buf = be->alloc(MemCategory::kWorkspace, DType::kF32, {N, o.hidden});
  ASSERT_TRUE(buf.is_ok());
  for (int k = kMb - 1; k >= 0; --k) {
    for (size_t s = st.size(); s-- > 0;) {
      st[s]->backward(k, 1.0f / kMb, *buf, split ? BackwardPart::kInput : BackwardPart::kAll);
      if (s > 0) be->copy(*buf, st[s]->input_grad());
    }
  }
  for (int k = 0; split && k < kMb; ++k) {
    for (auto& m : st) m->backward_weight(k);
  }
  // Gradients by name; wte is the sum of its two copies (first and last stage).
  for (size_t i = 0; i < w.table().specs().size(); ++i) {
    const std::string& name = w.table().specs()[i].name;
    std::vector<float> sum(static_cast<size_t>(w.table().specs()[i].numel()), 0.0f);
    int copies = 0;
    for (const auto& m : st) {
      const int j = m->table().find(name);
      if (j < 0) continue;
      ++copies;
      const std::vector<float> g = host(*be, m->grad(j));
      for (size_t e = 0; e < sum.size(); ++e) sum[e] += g[e];
    }
    EXPECT_EQ(copies, name == "wte.weight" ? 2 : 1) << name;
    const std::vector<float> ref = host(*be, w.grad(static_cast<int>(i)));
    for (size_t e = 0; e < sum.size(); ++e) {
      ASSERT_NEAR(sum[e], ref[e], 1e-6f + 1e-5f * std::fabs(ref[e])) << name << "[" << e << "]";
    }
  }
  be->release(&*buf);
}

TEST(Stage, Gpt2TiedWithDropoutMatchesTheWholeModel) { check_stages(options(Arch::kGpt2, 0.1f)); }
TEST(Stage, LlamaMatchesTheWholeModel) { check_stages(options(Arch::kLlama, 0.0f)); }
TEST(Stage, SplitBackwardMatchesTheWholeModel) {
  check_stages(options(Arch::kGpt2, 0.1f), true);
  check_stages(options(Arch::kLlama, 0.0f), true);
}

TEST(Stage, BadRangeIsRefused) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const ModelOptions o = options(Arch::kGpt2, 0.0f);
  EXPECT_FALSE(Model::create(o, be.get(), 1, 1, {}, {}, {}, StageOptions{2, 2, 1}).is_ok());
  EXPECT_FALSE(Model::create(o, be.get(), 1, 1, {}, {}, {}, StageOptions{0, 5, 1}).is_ok());
  EXPECT_FALSE(Model::create(o, be.get(), 1, 1, {}, {}, {}, StageOptions{0, 2, 0}).is_ok());
}

}  // namespace
}  // namespace partrain::engine::model
