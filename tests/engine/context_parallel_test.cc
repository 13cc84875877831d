// Context parallelism in the engine (engine/model/context_parallel.h): cp ranks as threads
// with an in-process ContextComm compute exactly one rank's model. Each rank is given the
// same whole sequences and keeps its two chunks; the sum of the ranks' loss shares is one
// rank's loss, the average of their gradients (each cp times its share, as the data
// plugin's average over the dp x cp group sees them) is one rank's gradient, and their MoE
// routing counts sum to one rank's. GPT-2 with learned positions and dropout, LLaMA with
// GQA and RoPE, and a LLaMA MoE whose capacity drops tokens (routed over the whole
// micro-batch), on cp2 and cp4, with gradient accumulation over two micro-batches.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/model/model.h"

namespace partrain::engine::model {
namespace {

// The cp group in one process: every rank publishes its block, then attends to each
// rank's in ring order; backward leaves each rank's gradient for block s in a per-(rank,
// source) buffer, and the holder of s sums them in rank order.
class ThreadContext {
 public:
  explicit ThreadContext(int n) : n_(n), bar_(n), kv_(static_cast<size_t>(n)), parts_(static_cast<size_t>(n) * n) {}
  void forward(int rank, Backend& be, const Tensor& kv, const ContextComm::Attend& attend) {
    kv_[static_cast<size_t>(rank)] = kv;
    bar_.arrive_and_wait();
    for (int step = 0; step < n_; ++step) {
      const int s = (rank - step + n_) % n_;
      attend(s, kv_[static_cast<size_t>(s)]);
    }
    (void)be;
    bar_.arrive_and_wait();
  }
  void backward(int rank, Backend& be, const Tensor& kv, const Tensor& dkv, const ContextComm::AttendBackward& f) {
    kv_[static_cast<size_t>(rank)] = kv;
    bar_.arrive_and_wait();
    for (int s = 0; s < n_; ++s) {
      std::vector<float>& part = parts_[static_cast<size_t>(rank) * n_ + s];
      part.assign(static_cast<size_t>(kv.numel()), 0.0f);
      f(s, kv_[static_cast<size_t>(s)], Tensor{part.data(), DType::kF32, kv.shape});
    }
    bar_.arrive_and_wait();
    for (int r = 0; r < n_; ++r) {
      const std::vector<float>& part = parts_[static_cast<size_t>(r) * n_ + rank];
      be.accumulate(dkv, Tensor{const_cast<float*>(part.data()), DType::kF32, dkv.shape});
    }
    bar_.arrive_and_wait();
  }
  void all_gather(int rank, const Tensor& full, const Tensor& part) {
    kv_[static_cast<size_t>(rank)] = part;
    bar_.arrive_and_wait();
    for (int r = 0; r < n_; ++r) {
      const Tensor& p = kv_[static_cast<size_t>(r)];
      std::copy_n(p.ptr<float>(), p.numel(), full.ptr<float>() + r * p.numel());
    }
    bar_.arrive_and_wait();
  }

 private:
  int n_;
  std::barrier<> bar_;
  std::vector<Tensor> kv_;
  std::vector<std::vector<float>> parts_;
};

class RankContext final : public ContextComm {
 public:
  RankContext(ThreadContext* g, int rank, Backend* be) : g_(g), rank_(rank), be_(be) {}
  int scratch_blocks() const override { return 0; }
  void forward(const Tensor& kv, const Tensor&, const Attend& attend) override { g_->forward(rank_, *be_, kv, attend); }
  void backward(const Tensor& kv, const Tensor& dkv, const Tensor&, const AttendBackward& f) override {
    g_->backward(rank_, *be_, kv, dkv, f);
  }
  void all_gather(const Tensor& full, const Tensor& part) override { g_->all_gather(rank_, full, part); }

 private:
  ThreadContext* g_;
  int rank_;
  Backend* be_;
};

ModelOptions tiny(Arch arch) {
  ModelOptions o;
  o.arch = arch;
  o.vocab_size = 23;
  o.seq_len = 16;
  o.layers = 2;
  o.hidden = 16;
  o.heads = 4;
  o.kv_heads = arch == Arch::kLlama ? 2 : 0;
  o.ffn_hidden = arch == Arch::kLlama ? 24 : 0;
  o.tie_embeddings = arch == Arch::kGpt2;
  o.init_std = 0.2f;
  return o;
}

struct Data {
  std::vector<int32_t> in, tgt;
};
Data random_data(int B, int T, int V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, V - 1);
  Data x;
  for (int i = 0; i < B * T; ++i) x.in.push_back(d(gen)), x.tgt.push_back(d(gen));
  x.tgt[3] = -1;  // an ignored target: not in the mean, on whichever rank holds it
  return x;
}

std::vector<float> host_grads(Model& m) {
  std::vector<float> g(static_cast<size_t>(m.num_params()));
  m.backend().to_host(g.data(), m.grads());
  return g;
}

struct Result1 {
  double loss = 0;
  std::vector<float> grads;
  std::vector<int64_t> tokens;
  int64_t dropped = 0;
};

// Two micro-batches of B sequences, accumulated (1/2 each), at optimizer step 3.
Result1 run(const ModelOptions& o, int B, const Data d[2], int cp) {
  ThreadContext group(cp);
  std::vector<std::unique_ptr<Backend>> be;
  std::vector<std::unique_ptr<Model>> m;
  for (int r = 0; r < cp; ++r) {
    be.push_back(make_cpu_backend());
    auto made = Model::create(o, be.back().get(), B, 42, {}, {}, {}, {}, ContextOptions{r, cp});
    EXPECT_TRUE(made.is_ok()) << made.status().message();
    if (!made) return {};
    m.push_back(std::move(made).value());
  }
  std::vector<RankContext> comms;
  for (int r = 0; r < cp; ++r) comms.emplace_back(&group, r, be[static_cast<size_t>(r)].get());
  std::vector<double> loss(static_cast<size_t>(cp), 0.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r) {
    threads.emplace_back([&, r] {
      Model& model = *m[static_cast<size_t>(r)];
      if (cp > 1) {
        EXPECT_TRUE(model.set_context_comm(&comms[static_cast<size_t>(r)]).is_ok());
      }
      model.zero_grads();
      model.reset_moe_stats();
      for (int k = 0; k < 2; ++k) {
        const MicroBatch mb{d[k].in.data(), d[k].tgt.data(), B, static_cast<uint64_t>(5 + k * B), 3};
        auto l = model.forward(mb);
        EXPECT_TRUE(l.is_ok()) << l.status().message();
        loss[static_cast<size_t>(r)] += l.is_ok() ? l->loss / 2 : NAN;
        model.backward(0.5f);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Result1 out;
  out.grads.assign(static_cast<size_t>(m[0]->num_params()), 0.0f);
  for (int r = 0; r < cp; ++r) {
    out.loss += loss[static_cast<size_t>(r)];  // shares
    const std::vector<float> g = host_grads(*m[static_cast<size_t>(r)]);
    for (size_t i = 0; i < g.size(); ++i) out.grads[i] += g[i] / static_cast<float>(cp);  // the dp x cp average
    const MoeStats& st = m[static_cast<size_t>(r)]->moe_stats();
    out.tokens.resize(st.tokens.size(), 0);
    for (size_t i = 0; i < st.tokens.size(); ++i) out.tokens[i] += st.tokens[i];
    out.dropped += st.dropped;
  }
  return out;
}

void check_cp_equals_one_rank(const ModelOptions& o, int cp, bool drops = false) {
  SCOPED_TRACE("cp" + std::to_string(cp));
  const int B = 2;
  const Data d[2] = {random_data(B, o.seq_len, o.vocab_size, 7), random_data(B, o.seq_len, o.vocab_size, 8)};
  const Result1 one = run(o, B, d, 1), many = run(o, B, d, cp);
  ASSERT_FALSE(one.grads.empty());
  ASSERT_EQ(one.grads.size(), many.grads.size());
  EXPECT_NEAR(many.loss, one.loss, 1e-6 * std::fabs(one.loss));
  float scale = 0;
  for (float g : one.grads) scale = std::max(scale, std::fabs(g));
  ASSERT_GT(scale, 0.0f);
  for (size_t i = 0; i < one.grads.size(); ++i) {
    ASSERT_NEAR(many.grads[i], one.grads[i], 1e-5f * scale) << "gradient " << i;
  }
  EXPECT_EQ(many.tokens, one.tokens);
  EXPECT_EQ(many.dropped, one.dropped);
  if (drops) {
    EXPECT_GT(one.dropped, 0);  // the capacity really drops tokens here
  }
}

TEST(ContextParallel, Gpt2LearnedPositionsAndDropout) {
  omp_set_num_threads(1);
  ModelOptions o = tiny(Arch::kGpt2);
  o.dropout = 0.2f;
  check_cp_equals_one_rank(o, 2);
  check_cp_equals_one_rank(o, 4);
}

TEST(ContextParallel, LlamaGqaRope) {
  omp_set_num_threads(1);
  const ModelOptions o = tiny(Arch::kLlama);
  check_cp_equals_one_rank(o, 2);
  check_cp_equals_one_rank(o, 4);
}

// Selective and full recompute re-run the attention core (and its exchange) in backward.
TEST(ContextParallel, RecomputeModes) {
  omp_set_num_threads(1);
  for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
    ModelOptions o = tiny(Arch::kLlama);
    o.recompute = r;
    o.dropout = 0.1f;
    check_cp_equals_one_rank(o, 2);
  }
}

TEST(ContextParallel, MoeRoutesTheWholeMicroBatch) {
  omp_set_num_threads(1);
  ModelOptions o = tiny(Arch::kLlama);
  o.moe_experts = 4;
  o.moe_top_k = 2;
  o.moe_every = 1;
  o.moe_capacity_factor = 0.5f;
  o.moe_aux_loss_coef = 0.1f;
  check_cp_equals_one_rank(o, 2, true);
  check_cp_equals_one_rank(o, 4, true);
}

TEST(ContextParallel, RefusesASequenceThatDoesNotCutInto2cpChunks) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  ModelOptions o = tiny(Arch::kGpt2);
  o.seq_len = 12;
  auto m = Model::create(o, be.get(), 1, 1, {}, {}, {}, {}, ContextOptions{0, 4});
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().message(), "[model] seq_len 12 must be a multiple of 2 x cp 4 (every sequence is cut into "
                                  "2cp chunks); pick a seq_len or cp that fits");
}

}  // namespace
}  // namespace partrain::engine::model
