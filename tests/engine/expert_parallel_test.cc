// Expert parallelism in the engine (engine/model/expert_parallel.h): the dispatch plan's
// bookkeeping by hand, with uneven and zero counts; and two expert-parallel ranks (threads,
// an in-process all-to-all) computing exactly the single-rank model's losses and
// gradients on the same two micro-batches: with and without dropping, with a dense block
// between MoE blocks, and with a micro-batch that sends no rows at all to the other rank.
//
// MoE blocks under tensor parallelism (engine/model/moe_tp.cc): two tp ranks (threads, an
// in-process TensorComm) on the same micro-batch, each routing its own half of the tokens
// with the experts whole, against one rank on that micro-batch: the loss (cross entropy and
// aux) equal, the kept tokens per expert and the dropped choices summed over the two equal
// one rank's (a capacity that drops, so the second rank's admission depends on the first's
// choices), and every gradient equal at its logical elements: the routers' and experts'
// (tp_summed) as the sum of the two ranks', the split tensors' pieces, the whole ones on
// each rank. With and without sequence parallelism, GPT-2 top-1 with a dense block between
// MoE blocks, LLaMA top-2.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "engine/backend.h"
#include "engine/model/expert_parallel.h"
#include "engine/model/model.h"
#include "engine/model/tensor_parallel.h"
#include "tiny_models.h"

namespace partrain::engine::model {
namespace {

TEST(DispatchPlan, UnevenAndZeroCountsByHand) {
  // Rank 1 of ep2 with E = 4 (it holds experts 2 and 3). It keeps 3, 0, 2, 1 rows for
  // experts 0..3: rows 0-2 go to rank 0 (expert 0), rows 3-5 to itself (2 then 3).
  // Rank 0 sends it 0 rows for expert 2 and 2 for expert 3; it sends itself 2 and 1.
  const DispatchPlan p = plan_dispatch({3, 0, 2, 1}, {0, 2, 2, 1}, 2);
  EXPECT_EQ(p.packed_offset, (std::vector<int64_t>{0, 3, 3, 5}));
  EXPECT_EQ(p.send_rows, (std::vector<size_t>{3, 3}));
  EXPECT_EQ(p.recv_rows, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(p.sent, 6);
  EXPECT_EQ(p.received, 5);
  // Receive order: source 0's rows for local expert 1 (expert 3); source 1's for 0 then 1.
  ASSERT_EQ(p.segments.size(), 3u);
  EXPECT_EQ(p.segments[0].source, 0);
  EXPECT_EQ(p.segments[0].local_expert, 1);
  EXPECT_EQ(p.segments[0].row, 0);
  EXPECT_EQ(p.segments[0].rows, 2);
  EXPECT_EQ(p.segments[1].source, 1);
  EXPECT_EQ(p.segments[1].local_expert, 0);
  EXPECT_EQ(p.segments[1].row, 2);
  EXPECT_EQ(p.segments[1].rows, 2);
  EXPECT_EQ(p.segments[2].local_expert, 1);
  EXPECT_EQ(p.segments[2].row, 4);
  EXPECT_EQ(p.segments[2].rows, 1);
}

TEST(DispatchPlan, NothingToSendOrReceive) {
  // ep4, E = 8 (two experts each): this rank keeps rows for experts 0 and 7 only; nobody
  // sends it anything.
  const DispatchPlan p = plan_dispatch({4, 0, 0, 0, 0, 0, 0, 1}, std::vector<int>(8, 0), 4);
  EXPECT_EQ(p.send_rows, (std::vector<size_t>{4, 0, 0, 1}));
  EXPECT_EQ(p.packed_offset, (std::vector<int64_t>{0, 4, 4, 4, 4, 4, 4, 4}));
  EXPECT_EQ(p.recv_rows, (std::vector<size_t>{0, 0, 0, 0}));
  EXPECT_TRUE(p.segments.empty());
  EXPECT_EQ(p.received, 0);
}

// An in-process expert-parallel group: one thread per rank, the all-to-all through shared
// pointers between two barriers.
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), bar_(n), in_(static_cast<size_t>(n)), send_(static_cast<size_t>(n)),
                                vals_(static_cast<size_t>(n)) {}
  void all_to_allv(int rank, const float* in, const std::vector<size_t>& send, float* out,
                   const std::vector<size_t>& recv) {
    in_[static_cast<size_t>(rank)] = in;
    send_[static_cast<size_t>(rank)] = send;
    bar_.arrive_and_wait();
    size_t at = 0;
    for (int q = 0; q < n_; ++q) {
      const std::vector<size_t>& s = send_[static_cast<size_t>(q)];
      size_t from = 0;
      for (int p = 0; p < rank; ++p) from += s[static_cast<size_t>(p)];
      if (s[static_cast<size_t>(rank)] != recv[static_cast<size_t>(q)]) mismatches_++;
      std::memcpy(out + at, in_[static_cast<size_t>(q)] + from, recv[static_cast<size_t>(q)] * sizeof(float));
      at += recv[static_cast<size_t>(q)];
    }
    bar_.arrive_and_wait();
  }
  double sum(int rank, double x) {
    vals_[static_cast<size_t>(rank)] = x;
    bar_.arrive_and_wait();
    double total = 0;
    for (double v : vals_) total += v;
    bar_.arrive_and_wait();
    return total;
  }
  int mismatches() const { return mismatches_; }

 private:
  int n_;
  std::barrier<> bar_;
  std::vector<const float*> in_;
  std::vector<std::vector<size_t>> send_;
  std::vector<double> vals_;
  std::atomic<int> mismatches_{0};
};

class RankComm final : public ExpertComm {
 public:
  RankComm(ThreadGroup* g, int rank) : g_(g), rank_(rank) {}
  void all_to_allv(const float* in, const std::vector<size_t>& send, float* out,
                   const std::vector<size_t>& recv) override {
    g_->all_to_allv(rank_, in, send, out, recv);
  }
  double sum(double x) override { return g_->sum(rank_, x); }

 private:
  ThreadGroup* g_;
  int rank_;
};

// An in-process tp group: one thread per rank; each collective publishes the rank's
// pointer, reads the others' between two barriers, then writes its own result.
class TpGroup {
 public:
  explicit TpGroup(int n) : n_(n), bar_(n), ptr_(static_cast<size_t>(n)), vals_(static_cast<size_t>(n)) {}
  void all_reduce(int rank, float* data, size_t count, bool max) {
    publish(rank, data);
    std::vector<float> out(data, data + count);
    for (size_t i = 0; i < count; ++i) {
      float acc = ptr_[0][i];
      for (int r = 1; r < n_; ++r) acc = max ? std::max(acc, ptr_[static_cast<size_t>(r)][i]) : acc + ptr_[static_cast<size_t>(r)][i];
      out[i] = acc;
    }
    bar_.arrive_and_wait();
    std::memcpy(data, out.data(), count * sizeof(float));
  }
  void all_gather(int rank, float* full, const float* shard, size_t count) {
    publish(rank, const_cast<float*>(shard));
    for (int r = 0; r < n_; ++r) std::memcpy(full + r * count, ptr_[static_cast<size_t>(r)], count * sizeof(float));
    bar_.arrive_and_wait();
  }
  void reduce_scatter(int rank, float* shard, const float* full, size_t count) {
    publish(rank, const_cast<float*>(full));
    std::vector<float> out(count, 0.0f);
    for (size_t i = 0; i < count; ++i) {
      for (int r = 0; r < n_; ++r) out[i] += ptr_[static_cast<size_t>(r)][rank * count + i];
    }
    bar_.arrive_and_wait();
    std::memcpy(shard, out.data(), count * sizeof(float));
  }
  double sum(int rank, double x) {
    vals_[static_cast<size_t>(rank)] = x;
    bar_.arrive_and_wait();
    double total = 0;
    for (double v : vals_) total += v;
    bar_.arrive_and_wait();
    return total;
  }

 private:
  void publish(int rank, float* p) {
    ptr_[static_cast<size_t>(rank)] = p;
    bar_.arrive_and_wait();
  }
  int n_;
  std::barrier<> bar_;
  std::vector<float*> ptr_;
  std::vector<double> vals_;
};

class RankTensorComm final : public TensorComm {
 public:
  RankTensorComm(TpGroup* g, int rank) : g_(g), rank_(rank) {}
  void all_reduce_sum(const Tensor& t) override { g_->all_reduce(rank_, t.ptr<float>(), static_cast<size_t>(t.numel()), false); }
  void all_reduce_max(const Tensor& t) override { g_->all_reduce(rank_, t.ptr<float>(), static_cast<size_t>(t.numel()), true); }
  void all_gather(const Tensor& full, const Tensor& shard) override {
    g_->all_gather(rank_, full.ptr<float>(), shard.ptr<float>(), static_cast<size_t>(shard.numel()));
  }
  void reduce_scatter(const Tensor& shard, const Tensor& full) override {
    g_->reduce_scatter(rank_, shard.ptr<float>(), full.ptr<float>(), static_cast<size_t>(shard.numel()));
  }
  double sum(double x) override { return g_->sum(rank_, x); }

 private:
  TpGroup* g_;
  int rank_;
};

// Every block a mixture of 4 experts, top-k, the given capacity factor.
ModelOptions moe(Arch arch, int k, float capacity) {
  ModelOptions o = engine::testing::tiny(arch);
  o.moe_experts = 4;
  o.moe_top_k = k;
  o.moe_every = 1;
  o.moe_capacity_factor = capacity;
  o.moe_aux_loss_coef = 0.1f;
  return o;
}

struct Batch {
  std::vector<int32_t> in, tgt;
};
Batch random_batch(int T, int V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(0, V - 1);
  Batch b;
  for (int i = 0; i < T; ++i) b.in.push_back(d(gen)), b.tgt.push_back(d(gen));
  return b;
}

std::vector<float> host_grads(Model& m) {
  std::vector<float> g(static_cast<size_t>(m.num_params()));
  m.backend().to_host(g.data(), m.grads());
  return g;
}

// One rank on micro-batches 0 and 1 (gradient accumulation, 1/2 each) against ep2, rank r
// on micro-batch r (scale 1): the replicated gradients averaged over the two ranks, an
// expert's halved (the worker's 1/dp), must equal one rank's. Returns whether some
// micro-batch sent no rows to the other rank in some block.
bool check_ep2_equals_one_rank(const ModelOptions& o, uint32_t seed, bool drops = false) {
  const Batch b[2] = {random_batch(o.seq_len, o.vocab_size, seed), random_batch(o.seq_len, o.vocab_size, seed + 1)};
  std::unique_ptr<Backend> be1 = make_cpu_backend();
  auto one = Model::create(o, be1.get(), 1, 42);
  EXPECT_TRUE(one.is_ok()) << one.status().message();
  (*one)->zero_grads();
  float loss1[2];
  std::vector<int64_t> tokens1[2];
  for (int r = 0; r < 2; ++r) {
    (*one)->reset_moe_stats();
    auto l = (*one)->forward({b[r].in.data(), b[r].tgt.data(), 1, static_cast<uint64_t>(r), 0});
    EXPECT_TRUE(l.is_ok());
    loss1[r] = l->loss;
    tokens1[r] = (*one)->moe_stats().tokens;
    (*one)->backward(0.5f);
  }
  const std::vector<float> g1 = host_grads(**one);
  if (drops) {
    EXPECT_GT((*one)->moe_stats().dropped, 0);  // the capacity really drops here
  }

  ThreadGroup group(2);
  std::unique_ptr<Backend> be[2] = {make_cpu_backend(), make_cpu_backend()};
  std::unique_ptr<Model> ep[2];
  for (int r = 0; r < 2; ++r) {
    auto m = Model::create(o, be[r].get(), 1, 42, {}, {}, ExpertOptions{r, 2});
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    ep[r] = std::move(m).value();
  }
  RankComm comms[2] = {RankComm(&group, 0), RankComm(&group, 1)};
  float loss_ep[2];
  std::vector<int64_t> tokens_ep[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      Model& m = *ep[r];
      m.set_expert_comm(&comms[r]);
      m.zero_grads();
      auto l = m.forward({b[r].in.data(), b[r].tgt.data(), 1, static_cast<uint64_t>(r), 0});
      loss_ep[r] = l.is_ok() ? l->loss : NAN;
      tokens_ep[r] = m.moe_stats().tokens;
      m.backward(1.0f);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(group.mismatches(), 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(loss_ep[r], loss1[r]) << "rank " << r;  // routing and experts: the same rows
    EXPECT_EQ(tokens_ep[r], tokens1[r]) << "rank " << r;
  }
  // Rank 0 holds experts 0, 1; rank 1 experts 2, 3.
  const std::vector<float> g[2] = {host_grads(*ep[0]), host_grads(*ep[1])};
  const ParamTable& t1 = (*one)->table();
  float scale = 0;
  for (float v : g1) scale = std::max(scale, std::fabs(v));
  int experts_seen = 0;
  for (int r = 0; r < 2; ++r) {
    for (const ParamSpec& s : ep[r]->table().specs()) {
      const ParamSpec& ref = t1.specs()[static_cast<size_t>(t1.find(s.name))];
      EXPECT_EQ(ref.numel(), s.numel()) << s.name;
      experts_seen += s.expert ? 1 : 0;
      for (int64_t j = 0; j < s.numel(); ++j) {
        const float want = g1[static_cast<size_t>(ref.offset + j)];
        const float got = s.expert ? g[r][static_cast<size_t>(s.offset + j)] / 2
                                   : (g[0][static_cast<size_t>(s.offset + j)] + g[1][static_cast<size_t>(s.offset + j)]) / 2;
        if (std::fabs(got - want) > 1e-5f * scale) {
          ADD_FAILURE() << s.name << "[" << j << "] on rank " << r << ": " << got << " vs one rank " << want;
          return false;
        }
      }
    }
  }
  const int moe_blocks = o.layers / o.moe_every;
  EXPECT_EQ(experts_seen, moe_blocks * 4 * (o.arch == Arch::kGpt2 ? 4 : 3));  // every expert once
  // The parameters of one rank's experts are the single-rank model's (init by name).
  const std::vector<float> p1 = (*one)->params_to_host(), p0 = ep[1]->params_to_host();
  for (const ParamSpec& s : ep[1]->table().specs()) {
    const ParamSpec& ref = t1.specs()[static_cast<size_t>(t1.find(s.name))];
    EXPECT_EQ(p0[static_cast<size_t>(s.offset)], p1[static_cast<size_t>(ref.offset)]) << s.name;
  }
  // Did a micro-batch send nothing to the other rank in some block?
  bool zero_send = false;
  for (int r = 0; r < 2; ++r) {
    for (size_t blk = 0; blk * 4 < tokens1[r].size(); ++blk) {
      const size_t other = r == 0 ? 2 : 0;
      zero_send |= tokens1[r][blk * 4 + other] + tokens1[r][blk * 4 + other + 1] == 0;
    }
  }
  return zero_send;
}

TEST(ExpertParallel, TwoRanksEqualOneRankTop2NoDropping) {
  omp_set_num_threads(1);
  check_ep2_equals_one_rank(moe(Arch::kGpt2, 2, 4.0f), 3);
}

TEST(ExpertParallel, TwoRanksEqualOneRankWithADenseBlock) {
  omp_set_num_threads(1);
  ModelOptions o = moe(Arch::kGpt2, 2, 1.0f);
  o.moe_every = 2;  // block 0 dense, block 1 MoE
  check_ep2_equals_one_rank(o, 11);
}

TEST(ExpertParallel, TwoRanksEqualOneRankLlamaWithDropping) {
  omp_set_num_threads(1);
  check_ep2_equals_one_rank(moe(Arch::kLlama, 2, 0.5f), 5, true);
}

// Top-1 with a concentrated router: some micro-batch routes all its tokens to one rank's
// experts, so the all-to-all carries 0 rows between some pair; searched over a few data
// seeds (deterministic), the first such case is checked like the others.
TEST(ExpertParallel, ARankSendingNothingToAnother) {
  omp_set_num_threads(1);
  ModelOptions o = moe(Arch::kGpt2, 1, 0.75f);
  o.init_std = 0.6f;
  bool found = false;
  for (uint32_t seed = 1; seed < 40 && !found; ++seed) {
    found = check_ep2_equals_one_rank(o, seed);
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_TRUE(found) << "no data seed below 40 sends 0 rows between the two ranks";
}

struct Forward {
  LossParts loss;
  MoeStats stats;
  std::vector<float> grads;
};

// One micro-batch of 2 sequences, backward at scale 1.
void check_tp2_equals_one_rank(const ModelOptions& o, bool sp, uint32_t seed) {
  const int B = 2, N = B * o.seq_len;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> tok(0, o.vocab_size - 1);
  std::vector<int32_t> in(static_cast<size_t>(N)), tgt(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) in[static_cast<size_t>(i)] = tok(gen), tgt[static_cast<size_t>(i)] = tok(gen);
  const MicroBatch batch{in.data(), tgt.data(), B, 0, 0};

  std::unique_ptr<Backend> be1 = make_cpu_backend();
  auto one = Model::create(o, be1.get(), B, 42);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  (*one)->zero_grads();
  (*one)->reset_moe_stats();
  auto l1 = (*one)->forward(batch);
  ASSERT_TRUE(l1.is_ok());
  (*one)->backward(1.0f);
  const std::vector<float> g1 = host_grads(**one);
  ASSERT_GT((*one)->moe_stats().dropped, 0) << "the capacity should drop choices";

  TpGroup group(2);
  std::unique_ptr<Backend> be[2] = {make_cpu_backend(), make_cpu_backend()};
  std::unique_ptr<Model> tp[2];
  for (int r = 0; r < 2; ++r) {
    auto m = Model::create(o, be[r].get(), B, 42, {}, TensorOptions{r, 2, sp});
    ASSERT_TRUE(m.is_ok()) << m.status().message();
    tp[r] = std::move(m).value();
  }
  RankTensorComm comms[2] = {RankTensorComm(&group, 0), RankTensorComm(&group, 1)};
  Forward f[2];
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      Model& m = *tp[r];
      m.set_tensor_comm(&comms[r]);
      m.zero_grads();
      m.reset_moe_stats();
      auto l = m.forward(batch);
      if (l.is_ok()) f[r].loss = *l;
      f[r].stats = m.moe_stats();
      m.backward(1.0f);
      f[r].grads = host_grads(m);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(f[r].loss.ce, l1->ce, 1e-6 * std::fabs(l1->ce)) << "rank " << r;
    EXPECT_NEAR(f[r].loss.aux, l1->aux, 1e-6 * std::fabs(l1->aux)) << "rank " << r;
  }
  // Routing: each rank counted its own tokens; together they are one rank's.
  const MoeStats& s1 = (*one)->moe_stats();
  ASSERT_EQ(f[0].stats.tokens.size(), s1.tokens.size());
  for (size_t i = 0; i < s1.tokens.size(); ++i) {
    EXPECT_EQ(f[0].stats.tokens[i] + f[1].stats.tokens[i], s1.tokens[i]) << "expert slot " << i;
  }
  EXPECT_EQ(f[0].stats.dropped + f[1].stats.dropped, s1.dropped);
  EXPECT_GT(f[1].stats.dropped, 0) << "the second half of the tokens should meet full experts";
  // Gradients at their logical elements.
  float scale = 0;
  for (float v : g1) scale = std::max(scale, std::fabs(v));
  const ParamTable& t1 = (*one)->table();
  int summed = 0;
  for (int r = 0; r < 2; ++r) {
    for (const ParamSpec& s : tp[r]->table().specs()) {
      const ParamSpec& ref = t1.specs()[static_cast<size_t>(t1.find(s.name))];
      // The logical index of each local element.
      std::vector<int64_t> logical;
      if (s.split()) {
        for (const ParamSpec::Piece& p : s.pieces) {
          for (int64_t j = 0; j < p.count; ++j) logical.push_back(p.begin + j);
        }
      } else {
        for (int64_t j = 0; j < s.numel(); ++j) logical.push_back(j);
      }
      ASSERT_EQ(static_cast<int64_t>(logical.size()), s.numel()) << s.name;
      summed += s.tp_summed && r == 0 ? 1 : 0;
      for (int64_t j = 0; j < s.numel(); ++j) {
        const float want = g1[static_cast<size_t>(ref.offset + logical[static_cast<size_t>(j)])];
        // The ranks' buffers differ in layout (rank 0 holds one vocabulary row more).
        const size_t at = static_cast<size_t>(s.offset + j), other = static_cast<size_t>(
            tp[1 - r]->table().specs()[static_cast<size_t>(tp[1 - r]->table().find(s.name))].offset + j);
        const float got = s.tp_summed ? f[r].grads[at] + f[1 - r].grads[other] : f[r].grads[at];
        if (std::fabs(got - want) > 2e-5f * scale) {
          ADD_FAILURE() << s.name << "[" << j << "] on tp rank " << r << ": " << got << " vs one rank " << want;
          return;
        }
      }
    }
  }
  // Every router and expert tensor of the MoE blocks is summed over tp.
  int moe_blocks = 0;
  for (int l = 0; l < o.layers; ++l) moe_blocks += is_moe_layer(o, l) ? 1 : 0;
  EXPECT_EQ(summed, moe_blocks * (1 + o.moe_experts * (o.arch == Arch::kGpt2 ? 4 : 3)));
}

// moe() with a wider init (a router that drops more) and MoE on every `every`-th block.
ModelOptions moe_tp(Arch arch, int k, float capacity, int every) {
  ModelOptions o = moe(arch, k, capacity);
  o.init_std = 0.3f;
  o.moe_every = every;
  return o;
}

TEST(MoeTensorParallel, Gpt2Top1WithADenseBlockSequenceParallel) {
  omp_set_num_threads(1);
  check_tp2_equals_one_rank(moe_tp(Arch::kGpt2, 1, 0.5f, 2), true, 3);
}

TEST(MoeTensorParallel, Gpt2Top1WithoutSequenceParallel) {
  omp_set_num_threads(1);
  check_tp2_equals_one_rank(moe_tp(Arch::kGpt2, 1, 0.5f, 1), false, 4);
}

TEST(MoeTensorParallel, LlamaTop2BothWays) {
  omp_set_num_threads(1);
  check_tp2_equals_one_rank(moe_tp(Arch::kLlama, 2, 0.75f, 1), true, 5);
  check_tp2_equals_one_rank(moe_tp(Arch::kLlama, 2, 0.75f, 1), false, 5);
}

}  // namespace
}  // namespace partrain::engine::model
