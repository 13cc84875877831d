// The step-time model's parts against hand arithmetic: a GEMM's time from its shape
// (tiles, waves, the K ramp, memory bound), NCCL's ring and tree costs per link class, the
// context-parallel and tensor-parallel terms (seq/cp tokens per rank, K/V bytes from
// kv_heads, the two context plugins, overlap), the pipeline from the cost-balanced
// partition, the gradient reduction over dp x cp, and selective recompute's extra FLOPs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "config/job_config.h"
#include "layout/cost_model.h"
#include "layout/layout.h"
#include "layout/mapping.h"
#include "planner/block_time.h"
#include "planner/collectives.h"
#include "planner/gemm.h"
#include "planner/plan.h"
#include "planner/step_time.h"
#include "hardware_dir.h"

namespace partrain::planner {
namespace {

// A device with round numbers: 100 TFLOP/s peak, half of it for GEMMs, K ramp 1000,
// 16 SMs, 1 TB/s, 1 us per kernel; links 100 GB/s in a node, 10 GB/s per device out of
// it, latencies 5 us per collective, 2 us per step in a node, 10 us across.
HardwareProfile round_device() {
  HardwareProfile h;
  h.name = "round";
  h.peak_bf16 = 100e12;
  h.peak_fp32 = 10e12;
  h.matmul_efficiency = 0.5;
  h.gemm_k_half = 1000;
  h.sm_count = 16;
  h.kernel_overhead = 1e-6;
  h.elementwise_efficiency = 1;
  h.attention_efficiency = 0.25;
  h.memory_bytes = 80e9;
  h.memory_bandwidth = 1e12;
  h.gpus_per_node = 8;
  h.intra_bandwidth = 100e9;
  h.intra_latency = 2e-6;
  h.inter_bandwidth = h.inter_switch_bandwidth = 10e9;
  h.inter_latency = 10e-6;
  h.collective_latency = 5e-6;
  return h;
}

TEST(PlannerGemm, TimeFromTilesWavesAndTheKRamp) {
  const HardwareProfile h = round_device();
  // 1280 x 2560 x 1000: 10 x 10 = 100 tiles of 128 x 256 (the other orientation makes 5 x
  // 20, as many), 7 waves over 16 SMs (112 slots): 100/112 used; rate 100e12 x 0.5 x
  // 100/112 x 1000/2000 = 22.32e12; 6.5536e9 FLOPs take 293.6 us, the 14.2 MB it moves
  // 14.2 us: compute-bound, plus 1 us.
  const double rate = 100e12 * 0.5 * (100.0 / 112) * 0.5;
  EXPECT_NEAR(gemm_seconds({1280, 2560, 1000}, h, 2), 2 * 1280.0 * 2560 * 1000 / rate + 1e-6, 1e-12);
  // A skinny K pays the ramp: 64 batched GEMMs of 2048 x 2048 x 64 (attention scores)
  // are 8192 tiles, 512 full waves, at 50e12 x 64/1064 = 3.008e12 FLOP/s: 11.42 ms.
  EXPECT_NEAR(gemm_seconds({2048, 2048, 64, 64}, h, 2), 2.0 * 2048 * 2048 * 64 * 64 / (50e12 * 64 / 1064) + 1e-6,
              1e-12);
  // Without the ramp the same scores with K = 16 are memory-bound: 8.59e9 FLOPs take
  // 0.172 ms at 50e12, the 2 x (2048 x 16 x 2 + 2048^2) x 64 = 545 MB they move 0.545 ms.
  HardwareProfile flat = h;
  flat.gemm_k_half = 0;
  const double bytes = 2.0 * (2048 * 16 * 2 + 2048.0 * 2048) * 64;
  EXPECT_NEAR(gemm_seconds({2048, 2048, 16, 64}, flat, 2), bytes / 1e12 + 1e-6, 1e-12);
  // Without SMs (CPU ranks) there is no wave model and no ramp: peak x efficiency.
  HardwareProfile cpu = h;
  cpu.sm_count = 0;
  cpu.gemm_k_half = 0;
  cpu.kernel_overhead = 0;
  EXPECT_NEAR(gemm_rate({1280, 2560, 1000}, cpu, 2), 50e12, 1e3);
  // The backward of a linear layer is its two gradient GEMMs.
  const GemmTimes t = linear_seconds(1280, 2560, 1000, h, 2);
  EXPECT_DOUBLE_EQ(t.backward, gemm_seconds({1280, 1000, 2560}, h, 2) + gemm_seconds({1000, 2560, 1280}, h, 2));
}

TEST(PlannerCollectives, RingAndTreeAsNcclCostsThem) {
  const HardwareProfile h = round_device();
  const double S = 64e6;
  // All-reduce over 8 devices of one node: latency 5 + 14 x 2 us, bandwidth 2 x 7/8 S / 100e9.
  GroupSpan node{8, 1, 8, false};
  EXPECT_NEAR(collective_seconds(Collective::kAllReduce, S, node, h), 33e-6 + 2 * 7.0 / 8 * S / 100e9, 1e-12);
  // Reduce-scatter and all-gather: half the steps and bytes.
  EXPECT_NEAR(collective_seconds(Collective::kReduceScatter, S, node, h), 5e-6 + 7 * 2e-6 + 7.0 / 8 * S / 100e9, 1e-12);
  // 16 nodes, one device each: every ring step crosses nodes at the device's 10 GB/s.
  // Ring: 5 + 30 x 10 us + 2 x 15/16 S / 10e9 = 12.305 ms; tree: 5 + 2 x 4 x 10 us +
  // 2 S / (0.92 x 10e9) = 13.998 ms: NCCL keeps the ring.
  GroupSpan spread{16, 16, 1, false};
  const double ring = 5e-6 + 30 * 10e-6 + 2 * 15.0 / 16 * S / 10e9;
  EXPECT_NEAR(collective_seconds(Collective::kAllReduce, S, spread, h), ring, 1e-12);
  // A 64 KB all-reduce over 256 nodes: the ring pays 510 network steps (5.1 ms), the tree
  // 2 log2(256) = 16 (0.16 ms): NCCL takes the tree.
  GroupSpan wide{256, 256, 1, false};
  const double tree = 5e-6 + 2 * 8 * 10e-6 + 2 * 64e3 / (0.92 * 10e9);
  EXPECT_NEAR(collective_seconds(Collective::kAllReduce, 64e3, wide, h), tree, 1e-12);
  // Four members on each of two nodes drive four NICs: 40 GB/s, below NVLink's 100.
  EXPECT_DOUBLE_EQ(bus_bandwidth(GroupSpan{8, 2, 4, false}, h), 40e9);
  EXPECT_DOUBLE_EQ(bus_bandwidth(GroupSpan{64, 4, 16, false}, h), 100e9);
  // A send inside a node and across.
  EXPECT_DOUBLE_EQ(send_seconds(1e6, false, false, h), 2e-6 + 1e6 / 100e9);
  EXPECT_DOUBLE_EQ(send_seconds(1e6, true, false, h), 10e-6 + 1e6 / 10e9);
}

// A LLaMA block with grouped-query attention: C 1024, 16 heads of 64, 4 kv heads, F 2816.
ModelDims gqa_model(double T) {
  engine::ModelOptions o;
  o.arch = engine::Arch::kLlama;
  o.vocab_size = 32000;
  o.seq_len = static_cast<int>(T);
  o.layers = 8;
  o.hidden = 1024;
  o.heads = 16;
  o.kv_heads = 4;
  o.ffn_hidden = 2816;
  return model_dims(o);
}

TEST(PlannerContextParallel, KeyValueBytesFollowKvHeadsAndThePlugin) {
  const HardwareProfile h = round_device();
  const Precision p;  // bf16 activations
  const ModelDims m = gqa_model(8192);
  PlanLayout l;
  l.cp = 4;
  l.micro_batch = 1;
  Spans s;
  s.cp = GroupSpan{4, 4, 1, false};  // one cp rank per node
  Runtime rt;
  rt.attention = AttentionKernel::kFused;
  // The rank's K and V: 2 x (8192/4 tokens) x 4 kv heads x 64 x 2 bytes = 2 MiB, a quarter
  // of what all 16 heads would make.
  const double kv = 2 * 2048.0 * 4 * 64 * 2;
  // Ring: 3 sends forward, each hidden behind a quarter of the attention; flash attention
  // of the rank's 2048 queries against 4096 keys on average: 4 x 16 x 64 x 2048 x 4096
  // FLOPs at 25 TFLOP/s = 1.374 ms forward, a quarter 0.344 ms; a send takes 10 us +
  // 2 MiB / 10 GB/s = 0.220 ms: all hidden.
  l.cp_impl = "ring";
  EXPECT_DOUBLE_EQ(block_cost(m, l, false, rt, s, p, h).cp, 0);
  // On a slower network the part of each send that the attention does not cover shows.
  HardwareProfile slow = h;
  slow.inter_bandwidth = slow.inter_switch_bandwidth = 1e9;
  const double attention_fwd = 4.0 * 16 * 64 * 2048 * 4096 / 25e12 + 1e-6;
  const double attention_bwd = 2.5 * 4.0 * 16 * 64 * 2048 * 4096 / 25e12 + 2e-6;
  const double fwd = 3 * (10e-6 + kv / 1e9 - attention_fwd / 4);
  const double bwd = 3 * std::max(0.0, 10e-6 + 2 * kv / 1e9 - attention_bwd / 4);
  EXPECT_NEAR(block_cost(m, l, false, rt, s, p, slow).cp, fwd + bwd, 1e-12);
  // All-gather: the 4 ranks' K and V gathered forward, their gradients reduce-scattered
  // backward, neither hidden.
  l.cp_impl = "allgather";
  const double ag = collective_seconds(Collective::kAllGather, 4 * kv, s.cp, h);
  const double rs = collective_seconds(Collective::kReduceScatter, 4 * kv, s.cp, h);
  EXPECT_NEAR(block_cost(m, l, false, rt, s, p, h).cp, ag + rs, 1e-12);
  // The plugin comes from the job's cpimpl= item when the spec has one, else ring.
  config::JobConfig job;
  EXPECT_EQ(context_plugin(job), "ring");
}

TEST(PlannerContextParallel, TokensPerRankAreTheSequenceOverCp) {
  // Everything outside attention is per token: cp2 with two sequences per micro-batch
  // runs the GEMMs, norms and tp collectives of one sequence per rank.
  const HardwareProfile h = round_device();
  const ModelDims m = gqa_model(4096);
  PlanLayout one, two;
  one.micro_batch = 1;
  two.micro_batch = 2;
  two.cp = 2;
  one.tp = two.tp = 2;
  one.sp = two.sp = true;
  Spans s;
  s.tp = GroupSpan{2, 1, 2, false};
  s.cp = GroupSpan{2, 1, 2, false};
  const Runtime rt;
  const BlockCost a = block_cost(m, one, false, rt, s, Precision{}, h);
  const BlockCost b = block_cost(m, two, false, rt, s, Precision{}, h);
  EXPECT_DOUBLE_EQ(a.tp, b.tp);
  // The cost model's bytes per rank too: tp traffic of cp2 x micro_batch 2 equals cp1 x 1.
  const SlurmView view = SlurmView::uniform(1, 4);
  StepSizes sizes;
  sizes.hidden = 1024;
  sizes.seq_len = 4096;
  sizes.layers = 8;
  sizes.grad_accum = 1;
  ParallelSpec cp1 = *parse_spec("tp2,dp2");
  ParallelSpec cp2 = *parse_spec("tp2,cp2");
  const Layout l1 = *Layout::create(4, cp1), l2 = *Layout::create(4, cp2);
  sizes.micro_batch = 1;
  const StepCost c1 = step_cost(l1, view, *map_slurm_order(l1, view), sizes);
  sizes.micro_batch = 2;
  const StepCost c2 = step_cost(l2, view, *map_slurm_order(l2, view), sizes);
  EXPECT_DOUBLE_EQ(c1.tp.total(), c2.tp.total());
  // K/V ring bytes use kv_heads: 4 of 16 heads make a quarter of the bytes.
  sizes.kv_hidden = 256;
  const StepCost gqa = step_cost(l2, view, *map_slurm_order(l2, view), sizes);
  EXPECT_DOUBLE_EQ(gqa.cp.total() * 4, c2.cp.total());
  // Gradients reduce over dp x cp: cp2 alone (dp1) still reduces over 2 ranks.
  EXPECT_GT(c2.dp.total(), 0);
  EXPECT_EQ(gradient_groups(l2, Axis::kDp).size(), 2u);  // one per tp rank
  EXPECT_EQ(gradient_groups(l2, Axis::kDp).front().size(), 2u);
}

TEST(PlannerTensorParallel, OverlapHidesCollectivesBehindTheirGemms) {
  const HardwareProfile h = round_device();
  const ModelDims m = gqa_model(4096);
  PlanLayout l;
  l.tp = 8;
  l.sp = true;
  l.micro_batch = 1;
  Spans s;
  s.tp = GroupSpan{8, 1, 8, false};
  Runtime plain, overlap = plain, backward = plain;
  overlap.tp_overlap = true;
  backward.tp_backward_overlap = true;
  const double none = block_cost(m, l, false, plain, s, Precision{}, h).tp;
  const double bwd = block_cost(m, l, false, backward, s, Precision{}, h).tp;
  const double all = block_cost(m, l, false, overlap, s, Precision{}, h).tp;
  // Unhidden: 4 all-gathers and 4 reduce-scatters of the micro-batch's 4096 x 1024 x 2 bytes.
  const double ag = collective_seconds(Collective::kAllGather, 4096 * 1024 * 2.0, s.tp, h);
  const double rs = collective_seconds(Collective::kReduceScatter, 4096 * 1024 * 2.0, s.tp, h);
  EXPECT_NEAR(none, 4 * (ag + rs), 1e-12);
  EXPECT_LT(bwd, none);
  EXPECT_LT(all, bwd);
  EXPECT_GT(all, 0);  // at least one 1/tp chunk of each stays exposed
}

config::JobConfig job_of(const std::string& model, const std::string& spec, int global_batch, int micro) {
  const std::string text = "[model]\n" + model + "\n[data]\ntrain_files = [\"x.bin\"]\n[training]\nglobal_batch = " +
                           std::to_string(global_batch) + "\nmicro_batch = " + std::to_string(micro) +
                           "\n[parallelism]\nspec = \"" + spec + "\"\n";
  Result<config::JobConfig> j = config::parse_job(text, "/tmp/time-model.toml");
  EXPECT_TRUE(j.is_ok()) << j.status().message();
  return *j;
}

TEST(PlannerPipeline, StepTimeFollowsTheCostBalancedPartition) {
  // 12 GPT blocks with a large vocabulary over pp4: the runtime's partition gives the last
  // stage (with the head) fewer blocks than layers/p would, and the step is timed on it:
  // a uniform split of the same layout is slower.
  const std::string model = "arch = \"gpt2\"\nvocab_size = 50304\nseq_len = 1024\nlayers = 12\nhidden = 768\nheads = 12";
  const HardwareProfile hw = *load_hardware("A100-80GB", kHardwareDir);
  const config::JobConfig job = job_of(model, "pp4,dp2", 64, 1);
  Result<Plan> balanced = make_plan(job, Cluster{1, 8}, hw);
  ASSERT_TRUE(balanced.is_ok()) << balanced.status().message();
  ASSERT_EQ(balanced->layout.stage_bounds.size(), 5u);
  EXPECT_LT(balanced->layout.stage_bounds[4] - balanced->layout.stage_bounds[3], 3);
  PlanOptions uniform;
  uniform.runtime = balanced->runtime;
  uniform.runtime->balanced_partition = false;
  Result<Plan> even = make_plan(job, Cluster{1, 8}, hw, nullptr, uniform);
  ASSERT_TRUE(even.is_ok());
  EXPECT_LT(balanced->time.total, even->time.total);
  // Interleaving divides the bubble by v: (p-1)/v of a rank's micro-batch.
  const config::JobConfig inter = job_of(model, "pp4,dp2,sched=interleaved:3", 64, 1);
  Result<Plan> v3 = make_plan(inter, Cluster{1, 8}, hw);
  ASSERT_TRUE(v3.is_ok()) << v3.status().message();
  EXPECT_LT(v3->time.bubble, balanced->time.bubble / 2);
}

TEST(PlannerRecompute, SelectiveRecomputeRunsTheAttentionCoreAgain) {
  // Hardware FLOPs: selective adds the attention core's forward (4 T C per layer), full
  // every block's forward; the materialized kernel's time grows by its forward.
  const std::string model = "arch = \"gpt2\"\nvocab_size = 50304\nseq_len = 2048\nlayers = 4\nhidden = 1024\nheads = 16";
  const HardwareProfile hw = *load_hardware("A100-80GB", kHardwareDir);
  Result<Plan> none = make_plan(job_of(model + "\nrecompute = \"none\"", "dp8", 64, 1), Cluster{1, 8}, hw);
  Result<Plan> sel = make_plan(job_of(model + "\nrecompute = \"selective\"", "dp8", 64, 1), Cluster{1, 8}, hw);
  ASSERT_TRUE(none.is_ok() && sel.is_ok());
  const Flops f0 = flops_per_token(none->model, none->params), f1 = flops_per_token(sel->model, sel->params);
  EXPECT_DOUBLE_EQ(f1.hardware_per_token - f0.hardware_per_token, 4.0 * 2048 * 1024 * 4);
  EXPECT_GT(sel->time.compute, none->time.compute);
  EXPECT_DOUBLE_EQ(sel->time.model_flops_per_gpu / none->time.model_flops_per_gpu,
                   none->time.total / sel->time.total);
}

TEST(PlannerDataParallel, OverlapHidesTheReductionBehindTheLastBackward) {
  const std::string model = "arch = \"gpt2\"\nvocab_size = 50304\nseq_len = 1024\nlayers = 24\nhidden = 2048\nheads = 16";
  const HardwareProfile hw = *load_hardware("H100-SXM", kHardwareDir);
  const config::JobConfig job = job_of(model, "dp32", 256, 8);
  PlanOptions hidden, exposed;
  exposed.runtime = Runtime{};
  exposed.runtime->dp_overlap = false;
  Result<Plan> a = make_plan(job, Cluster{4, 8}, hw, nullptr, hidden);
  Result<Plan> b = make_plan(job, Cluster{4, 8}, hw, nullptr, exposed);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_DOUBLE_EQ(a->time.dp, b->time.dp);
  EXPECT_DOUBLE_EQ(b->time.dp_exposed, b->time.dp);
  EXPECT_LT(a->time.dp_exposed, a->time.dp);
  // Every 25 MB bucket (6.55M fp32 gradients) is its own all-reduce over 32 devices on 4
  // nodes (8 per node: min(370.8, 8 x 48) GB/s) and pays its latency; NCCL takes the faster
  // of the ring (8.4 us + 56 NVLink steps of 3.4 us + 6 network steps of 14 us) and the tree
  // (8.4 us + 2 (7 x 3.4 + 2 x 14) us, at 0.92 of the bus bandwidth for twice the bytes).
  const double buckets = std::ceil(a->params.total / 6553600.0), bytes = a->params.total * 4 / buckets;
  const double ring = 8.4e-6 + 56 * 3.4e-6 + 6 * 14e-6 + 2 * 31.0 / 32 * bytes / 370.8e9;
  const double tree = 8.4e-6 + 2 * (7 * 3.4e-6 + 2 * 14e-6) + 2 * bytes / (0.92 * 370.8e9);
  EXPECT_NEAR(a->time.dp, buckets * std::min(ring, tree), 1e-6);
}

}  // namespace
}  // namespace partrain::planner
