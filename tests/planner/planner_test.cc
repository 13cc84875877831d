// The planner's formulas against numbers worked out by hand or published independently:
// the seed texts' worked examples (7B in fp16 = 14 GB, 16/18 bytes per parameter for
// mixed-precision Adam, bubbles of 27.3% and 15.8%, a global batch of 256), LLaMA-7B's
// published parameter count, ZeRO / tensor / pipeline sharding by hand arithmetic, and the
// shipped hardware profiles.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "config/job_config.h"
#include "planner/hardware.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/step_time.h"
#include "hardware_dir.h"

namespace partrain::planner {
namespace {

ModelDims llama7b() {
  engine::ModelOptions o;
  o.arch = engine::Arch::kLlama;
  o.vocab_size = 32000;
  o.seq_len = 2048;
  o.layers = 32;
  o.hidden = 4096;
  o.heads = 32;
  o.ffn_hidden = 11008;
  o.tie_embeddings = false;
  return model_dims(o);
}

// The tiny GPT-2 of etc/examples/tiny.toml: V 256, T 64, L 2, C 128, H 4, F = 4C = 512.
ModelDims tiny_gpt2() {
  engine::ModelOptions o;
  o.vocab_size = 256;
  o.seq_len = 64;
  o.layers = 2;
  o.hidden = 128;
  o.heads = 4;
  return model_dims(o);
}

TEST(PlannerSeed, SevenBillionParametersInFp16AreFourteenGigabytes) {
  // LLaMA-7B as published (Hugging Face's count): 6,738,415,616 parameters.
  const ParamCounts p = count_params(llama7b());
  EXPECT_DOUBLE_EQ(p.total, 6738415616.0);
  Precision fp16{2, 2, 2, false};
  PlanLayout one;
  const MemoryBreakdown m = stage_memory(llama7b(), one, fp16, 0, 0, 0);
  EXPECT_DOUBLE_EQ(m.weights, 2 * 6738415616.0);
  EXPECT_NEAR(m.weights / 1e9, 13.5, 0.05);  // "7B in fp16 = 14 GB", with 7B rounded
  // And an exact 7e9 parameters at 2 bytes: 14e9 bytes.
  EXPECT_DOUBLE_EQ(7e9 * fp16.param_bytes, 14e9);
}

TEST(PlannerSeed, MixedPrecisionAdamIsSixteenBytesPerParameterEighteenWithFp32Grads) {
  PlanLayout one;
  const ModelDims m = tiny_gpt2();
  const Precision bf16_grads{2, 2, 2, true};
  const MemoryBreakdown a = stage_memory(m, one, bf16_grads, 0, 0, 0);
  EXPECT_DOUBLE_EQ((a.weights + a.grads + a.optimizer) / a.params, 16.0);  // 2 + 2 + 4 + 4 + 4
  const Precision fp32_grads{2, 4, 2, true};  // what the CUDA engine keeps
  const MemoryBreakdown b = stage_memory(m, one, fp32_grads, 0, 0, 0);
  EXPECT_DOUBLE_EQ((b.weights + b.grads + b.optimizer) / b.params, 18.0);
  // The shipped GPU profiles train in the second, the CPU profile in fp32 (4 + 4 + 8).
  EXPECT_EQ(load_hardware("H100-SXM", kHardwareDir)->precision().param_bytes, 2);
  const Precision cpu = load_hardware("cpu", kHardwareDir)->precision();
  EXPECT_EQ(cpu.param_bytes + cpu.grad_bytes + cpu.optimizer_bytes(), 16);
}

TEST(PlannerSeed, PipelineBubble) {
  EXPECT_NEAR(bubble_fraction(4, 8), 0.273, 5e-4);   // 3 / 11
  EXPECT_NEAR(bubble_fraction(4, 16), 0.158, 5e-4);  // 3 / 19
  EXPECT_DOUBLE_EQ(bubble_fraction(4, 8, 2), 3.0 / 11 / 2);
  EXPECT_DOUBLE_EQ(bubble_fraction(1, 8), 0.0);
}

config::JobConfig job(const std::string& extra_model, int global_batch, int micro_batch,
                      const std::string& spec) {
  const std::string text = "[model]\narch = \"gpt2\"\nvocab_size = 256\nseq_len = 64\nlayers = 8\n"
                           "hidden = 128\nheads = 4\n" + extra_model +
                           "\n[data]\ntrain_files = [\"x.bin\"]\n[training]\nglobal_batch = " + std::to_string(global_batch) +
                           "\nmicro_batch = " + std::to_string(micro_batch) +
                           "\n[parallelism]\nspec = \"" + spec + "\"\n";
  Result<config::JobConfig> j = config::parse_job(text, "/tmp/planner-test.toml");
  EXPECT_TRUE(j.is_ok()) << j.status().message();
  return *j;
}

TEST(PlannerSeed, GlobalBatchIsMicroTimesAccumTimesDp) {
  const HardwareProfile hw = *load_hardware("A100-80GB", kHardwareDir);
  Result<Plan> p = make_plan(job("", 256, 4, "dp8"), Cluster{1, 8}, hw);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p->layout.grad_accum, 8);
  EXPECT_EQ(p->global_batch, 256);  // b 4 x a 8 x n 8
  // A batch that does not divide is refused with the fix, never rounded.
  Result<Plan> bad = make_plan(job("", 264, 4, "dp8"), Cluster{1, 8}, hw);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("global_batch"), std::string::npos);
}

TEST(PlannerMemory, TinyGpt2ParametersByHand) {
  // wte 256*128 + wpe 64*128 + 2 blocks x (LN 4C + c_attn 3C*C + 3C + c_proj C*C + C
  // + c_fc 4C*C + 4C + c_proj 4C*C + C) + ln_f 2C = 32768 + 8192 + 2 x 198272 + 256.
  EXPECT_DOUBLE_EQ(count_params(tiny_gpt2()).total, 437760.0);
}

// Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters
// Using Megatron-LM"), Table 1: GPT models with V 51200, T 2048, and the published sizes.
TEST(PlannerMemory, MegatronModelSizesFromTheirShapes) {
  struct Row { int heads, hidden, layers; double billions; };
  const Row rows[] = {{24, 2304, 24, 1.7},     {32, 3072, 30, 3.6},     {32, 4096, 36, 7.5},
                      {48, 6144, 40, 18.4},    {64, 8192, 48, 39.1},    {80, 10240, 60, 76.1},
                      {96, 12288, 80, 145.6},  {128, 16384, 96, 310.1}, {128, 20480, 105, 529.6},
                      {160, 25600, 128, 1008.0}};
  for (const Row& r : rows) {
    engine::ModelOptions o;
    o.vocab_size = 51200;
    o.seq_len = 2048;
    o.heads = r.heads;
    o.hidden = r.hidden;
    o.layers = r.layers;
    EXPECT_NEAR(count_params(model_dims(o)).total / 1e9, r.billions, 0.05) << r.billions << "B";
  }
}

TEST(PlannerMemory, ZeroStagesShardOptimizerThenGradientsThenWeights) {
  // The demo's GPT-2 (C=128, V=256, T=64) with 16 blocks, as the engine stores ZeRO
  // (engine/model/sharding.h), on dp4, bf16 weights + fp32 grads + 12 bytes of Adam state:
  //   block = ln 512 + c_attn 49536 + c_proj 16512 + c_fc 66048 + c_proj 65664 = 198272
  //   ends  = wte 32768 + wpe 8192 + ln_f 256 = 41216;  P = 16 x 198272 + 41216 = 3213568
  //   shard = P / 4 = 803392;  slots = 2 blocks + ends = 437760 (prefetch 1: also 2 blocks)
  engine::ModelOptions o;
  o.vocab_size = 256;
  o.seq_len = 64;
  o.layers = 16;
  o.hidden = 128;
  o.heads = 4;
  const ModelDims m = model_dims(o);
  ASSERT_DOUBLE_EQ(count_params(m).total, 3213568.0);
  const Precision p{2, 4, 2, true};
  PlanLayout l;
  l.dp = 4;
  const double P = 3213568, shard = 803392, slots = 437760;
  const double optimizer[] = {P * 12, shard * 12, shard * 12, shard * 12};
  // zero1 reduces into an fp32 shard beside the full gradient; zero2/3 keep only slots.
  const double grads[] = {P * 4, P * 4 + shard * 4, shard * 4 + slots * 4, shard * 4 + slots * 4};
  const double weights[] = {P * 2, P * 2, P * 2, shard * 2 + slots * 2};
  for (int zero = 0; zero <= 3; ++zero) {
    l.zero = zero;
    const MemoryBreakdown b = stage_memory(m, l, p, 0, 0, 0);
    EXPECT_DOUBLE_EQ(b.optimizer, optimizer[zero]) << "zero" << zero;
    EXPECT_DOUBLE_EQ(b.grads, grads[zero]) << "zero" << zero;
    EXPECT_DOUBLE_EQ(b.weights, weights[zero]) << "zero" << zero;
  }
}

TEST(PlannerMemory, TensorParallelSplitsMatricesAndColumnBiasesOnly) {
  const ModelDims m = tiny_gpt2();
  PlanLayout l;
  l.tp = 2;
  const MemoryBreakdown b = stage_memory(m, l, Precision{4, 4, 4, false}, 0, 0, 0);
  // Per block, split: 3C*C + 3C + C*C + 4C*C + 4C + 4C*C = 197504, replicated: 4C + C + C
  // = 768 (norms, two row biases); vocab-parallel wte 32768 / 2; wpe 8192 and ln_f 256 whole.
  const double C = 128;
  EXPECT_DOUBLE_EQ(12 * C * C + 7 * C, 197504.0);
  EXPECT_DOUBLE_EQ(b.params, 2 * (197504.0 / 2 + 768) + 32768.0 / 2 + 8192 + 256);
}

TEST(PlannerMemory, UnevenVocabularyCountsTheRankWithMostRows) {
  // V 257 over tp2: rank 0 holds ceil(257/2) = 129 rows of wte (engine params.h
  // vocab_rows), and its logits and their gradient are [N, 129].
  ModelDims m = tiny_gpt2();
  m.V = 257;
  PlanLayout l;
  l.tp = 2;
  l.micro_batch = 1;
  const MemoryBreakdown b = stage_memory(m, l, Precision{4, 4, 4, false}, 0, 0, 0);
  const double C = 128, N = 64;
  EXPECT_DOUBLE_EQ(b.params, 2 * (197504.0 / 2 + 768) + 129 * C + 8192 + 256);
  ModelDims even = m;
  even.V = 258;  // 129 rows on both ranks: the same rank 0
  const MemoryBreakdown e = stage_memory(even, l, Precision{4, 4, 4, false}, 0, 0, 0);
  EXPECT_DOUBLE_EQ(e.params, b.params);
  EXPECT_DOUBLE_EQ(e.activations, b.activations);
  EXPECT_DOUBLE_EQ(e.workspace, b.workspace);
  even.V = 256;  // 128 rows: logits and dlogits lose one column each, wte one row
  const MemoryBreakdown d = stage_memory(even, l, Precision{4, 4, 4, false}, 0, 0, 0);
  EXPECT_DOUBLE_EQ(b.params - d.params, C);
  EXPECT_DOUBLE_EQ(b.activations - d.activations, N * 4);
  EXPECT_DOUBLE_EQ(b.workspace - d.workspace, N * 4);
}

TEST(PlannerMemory, SequenceParallelWorkspaceByHand) {
  // tp2 with sp on tiny gpt2, one sequence (N 64), fp32, no recompute: branch and dln whole
  // [N, C], dres and dbranch the rank's [N/2, C], datt [N, C/2], dqkv dfc dact
  // [N, (3C + 4C + 4C)/2], dloss [N], dlogits [N, V/2]; sp adds gathered, partial, dfull
  // [N, C], drows [N/2, C] and a [2C] norm gradient scratch.
  const ModelDims m = tiny_gpt2();
  PlanLayout l;
  l.tp = 2;
  l.sp = true;
  l.micro_batch = 1;
  const double N = 64, C = 128, V = 256;
  const double ws = 4 * (2 * N * C + 2 * (N / 2) * C + N * C / 2 + N * 11 * C / 2 + N + N * V / 2 +
                         3 * N * C + (N / 2) * C + 2 * C);
  EXPECT_DOUBLE_EQ(stage_memory(m, l, Precision{4, 4, 4, false}, 0, 0, 0).workspace, ws);
}

TEST(PlannerMemory, OneFOneBKeepsAtMostPMicroBatchesGPipeKeepsM) {
  PlanLayout l;
  l.pp = 4;
  l.grad_accum = 8;
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(l, 0), 4);
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(l, 3), 1);
  l.grad_accum = 2;
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(l, 0), 2);  // fewer micro-batches than stages
  l.grad_accum = 8;
  l.sched = "gpipe";
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(l, 0), 8);
  l.sched = "interleaved";
  l.virtual_stages = 2;
  // At least Megatron's p (1 + (p-1)/(p v)) = 5.5 on the first stage; each chunk keeping
  // its own peak (8 and 4 halves, pipeline_memory_test.cc) makes it 6.
  EXPECT_GE(in_flight_micro_batches(l, 0), 4 * (1 + 3.0 / 8));
  EXPECT_DOUBLE_EQ(in_flight_micro_batches(l, 0), 6);
  // GPipe's first stage holds more activations than 1F1B's at the same bubble.
  const ModelDims m = tiny_gpt2();
  PlanLayout a = l, b = l;
  a.sched = "gpipe";
  b.sched = "1f1b";
  b.virtual_stages = a.virtual_stages = 1;
  const Precision p{2, 4, 2, true};
  EXPECT_GT(stage_memory(m, a, p, 0, 0, 0).activations, stage_memory(m, b, p, 0, 0, 0).activations);
}

TEST(PlannerMemory, SequenceParallelSplitsTheSequenceTensors) {
  // One block's stored activations per micro-batch (N = b T tokens, fp32): with tp2 and
  // no SP the attention/MLP insides halve and the LayerNorm inputs/outputs do not; with
  // SP both halve, so the difference is exactly half of the sequence tensors.
  ModelDims m = tiny_gpt2();
  m.L = 2;
  PlanLayout l;
  l.tp = 2;
  l.micro_batch = 1;
  const Precision p{4, 4, 4, false};
  const double no_sp = stage_memory(m, l, p, 0, 0, 0).activations;
  l.sp = true;
  const double sp = stage_memory(m, l, p, 0, 0, 0).activations;
  const double N = 64, C = 128, V = 256;
  // Sequence tensors: res_[0..2] (3 NC), per block ln1 res2 ln2 (3 NC) + 4 N stats,
  // the head's lnf (NC) + 2 N stats; each x 4 bytes, and SP keeps half of them.
  const double seq = (3 * N * C + 2 * (3 * N * C + 4 * N) + N * C + 2 * N) * 4;
  EXPECT_DOUBLE_EQ(no_sp - sp, seq / 2);
  (void)V;
}

TEST(PlannerMemory, ContextParallelSplitsTheSequence) {
  // cp2 with two sequences per micro-batch keeps what cp1 keeps with one: N = b T / cp.
  const ModelDims m = tiny_gpt2();
  const Precision p{4, 4, 4, false};
  PlanLayout a, b;
  a.micro_batch = 1;
  b.micro_batch = 2;
  b.cp = 2;
  EXPECT_DOUBLE_EQ(stage_memory(m, a, p, 0, 0, 0).activations,
                   stage_memory(m, b, p, 0, 0, 0).activations);
  EXPECT_EQ(b.world(), 2);
  // The exchange of keys and values adds to the workspace: the rank's K and V are
  // 2 x 64 tokens x 4 kv heads x 32 x 4 bytes = 65536, kept with their gradient and the
  // rows' positions (64 x int32); the ring's scratch is two blocks in flight, two running
  // gradients and the arriving one (5 x 65536), the all-gather's all cp ranks' blocks and
  // their gradients (2 cp x 65536).
  const double kv = 2 * 64.0 * 4 * 32 * 4, pos = 64 * 4;
  const double ws1 = stage_memory(m, a, p, 0, 0, 0).workspace;
  EXPECT_DOUBLE_EQ(stage_memory(m, b, p, 0, 0, 0).workspace - ws1, (2 + 5) * kv + pos);
  PlanLayout c = b;
  c.cp = 4;
  c.micro_batch = 4;
  c.cp_impl = "allgather";
  EXPECT_DOUBLE_EQ(stage_memory(m, c, p, 0, 0, 0).workspace - ws1, (2 + 2 * 4) * kv + pos);
  // ZeRO shards over dp x cp: the optimizer state of cp2 x dp2 is a quarter.
  PlanLayout z;
  z.cp = 2;
  z.dp = 2;
  z.zero = 1;
  EXPECT_DOUBLE_EQ(stage_memory(m, z, p, 0, 0, 0).optimizer, count_params(m).total * 8 / 4);
}

TEST(PlannerTime, FlopsAreSixNPlusAttention) {
  const ModelDims m = llama7b();
  const ParamCounts p = count_params(m);
  const Flops f = flops_per_token(m, p);
  // Matmul weights: everything but the embedding lookup and the norms; the head counts.
  const double norms = 32 * 2 * 4096 + 4096;
  EXPECT_DOUBLE_EQ(p.active_matmul, p.total - 32000.0 * 4096 - norms);
  EXPECT_DOUBLE_EQ(f.model_per_token, 6 * p.active_matmul + 12 * 2048.0 * 4096 * 32);
  ModelDims full = m;
  full.recompute = engine::Recompute::kFull;
  // Full recompute runs every block's forward again (not the head).
  EXPECT_DOUBLE_EQ(flops_per_token(full, p).hardware_per_token,
                   f.model_per_token + f.forward_per_token - 2 * 32000.0 * 4096);
}

TEST(PlannerHardware, ShippedProfilesParseAndSayTheirPeaks) {
  for (const char* name : {"A100-80GB", "H100-SXM", "H200-SXM", "cpu"}) {
    Result<HardwareProfile> h = load_hardware(name, kHardwareDir);
    ASSERT_TRUE(h.is_ok()) << h.status().message();
    EXPECT_EQ(h->name, name);
    EXPECT_GT(h->peak(), 0);
    EXPECT_GT(h->memory_bytes, 0);
    EXPECT_GT(h->gpus_per_node, 0);
  }
  EXPECT_DOUBLE_EQ(load_hardware("A100-80GB", kHardwareDir)->peak_bf16, 312e12);
  EXPECT_DOUBLE_EQ(load_hardware("H100-SXM", kHardwareDir)->peak_bf16, 989e12);
  EXPECT_DOUBLE_EQ(load_hardware("H200-SXM", kHardwareDir)->memory_bandwidth, 4.8e12);
}

TEST(PlannerHardware, BadProfilesAreRefusedByName) {
  const std::string ok =
      "[device]\nname = \"x\"\n[compute]\npeak_bf16_flops = 1e12\npeak_fp32_flops = 1e12\n"
      "[memory]\nbytes = 1e9\nbandwidth = 1e9\n[node]\ngpus_per_node = 8\n"
      "[links]\nintra_node_bandwidth = 1e9\ninter_node_bandwidth = 1e9\n";
  EXPECT_TRUE(parse_hardware(ok, "x.toml").is_ok());
  Result<HardwareProfile> typo = parse_hardware(ok + "pek = 1\n", "x.toml");
  ASSERT_FALSE(typo.is_ok());
  EXPECT_NE(typo.status().message().find("links.pek"), std::string::npos);
  std::string missing = ok;
  missing.replace(missing.find("bandwidth = 1e9\n[node]"), 16, "");
  Result<HardwareProfile> m = parse_hardware(missing, "x.toml");
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("memory.bandwidth"), std::string::npos);
  // A table given twice is a TOML error, named with its line.
  Result<HardwareProfile> twice = parse_hardware(ok + "[compute]\n", "x.toml");
  ASSERT_FALSE(twice.is_ok());
  EXPECT_NE(twice.status().message().find("x.toml:"), std::string::npos);
  // attention_efficiency defaults to matmul_efficiency and must be a fraction.
  std::string eff = ok;
  eff.insert(eff.find("[memory]"), "matmul_efficiency = 0.5\n");
  EXPECT_DOUBLE_EQ(parse_hardware(eff, "x.toml")->attention_efficiency, 0.5);
  std::string too_much = ok;
  too_much.insert(too_much.find("[memory]"), "attention_efficiency = 2\n");
  Result<HardwareProfile> over = parse_hardware(too_much, "x.toml");
  ASSERT_FALSE(over.is_ok());
  EXPECT_NE(over.status().message().find("attention_efficiency"), std::string::npos);
  Result<HardwareProfile> unknown = load_hardware("B300", kHardwareDir);
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("H100-SXM"), std::string::npos);
}

TEST(PlannerSearch, SevenBillionOnEightH100sFitsOnlyWithSharding) {
  // LLaMA-7B in the CUDA engine's precision: 6.738e9 x 18 bytes = 121.3e9 bytes of weights,
  // gradients and Adam state before any activation, more than an 80 GiB H100; ZeRO-3 over
  // 8 ranks leaves 15.2e9 bytes of it per device.
  const std::string text =
      "[model]\narch = \"llama\"\nvocab_size = 32000\nseq_len = 2048\nlayers = 32\n"
      "hidden = 4096\nheads = 32\nffn_hidden = 11008\n[data]\ntrain_files = [\"x.bin\"]\n"
      "[training]\nglobal_batch = 64\nmicro_batch = 1\n";
  Result<config::JobConfig> j = config::parse_job(text, "/tmp/llama7b.toml");
  ASSERT_TRUE(j.is_ok()) << j.status().message();
  const HardwareProfile hw = *load_hardware("H100-SXM", kHardwareDir);
  config::JobConfig plain = *j, sharded = *j;
  plain.parallelism = *parse_spec("dp8");
  sharded.parallelism = *parse_spec("dp8,zero3");
  Result<Plan> a = make_plan(plain, Cluster{1, 8}, hw);
  Result<Plan> b = make_plan(sharded, Cluster{1, 8}, hw);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_DOUBLE_EQ(a->memory.weights + a->memory.grads + a->memory.optimizer, 6738415616.0 * 18);
  EXPECT_FALSE(a->fits);
  // zero3: 18 bytes per parameter over 8 ranks, plus the engine's slots at 2 + 4 bytes:
  // two blocks (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096 = 202383360 each) and the ends
  // (embed_tokens 131072000 + norm 4096 + lm_head 131072000 = 262148096).
  EXPECT_DOUBLE_EQ(b->memory.weights + b->memory.grads + b->memory.optimizer,
                   6738415616.0 * 18 / 8 + (2 * 202383360.0 + 262148096.0) * 6);
  EXPECT_TRUE(b->fits);
  // The search keeps only layouts that fit and that GPU ranks run: ZeRO runs on CPU
  // ranks only in this version (runnable.h), so no layout of 8 GPUs is left.
  EXPECT_FALSE(b->runnable.is_ok());
  EXPECT_TRUE(search_plans(*j, Cluster{1, 8}, hw).empty());
}

TEST(PlannerSearch, RanksFittingLayoutsFastestFirst) {
  const HardwareProfile hw = *load_hardware("A100-80GB", kHardwareDir);
  int considered = 0;
  const std::vector<Plan> plans = search_plans(job("", 64, 4, ""), Cluster{2, 8}, hw, &considered);
  ASSERT_GE(plans.size(), 3u);
  EXPECT_GT(considered, static_cast<int>(plans.size()) - 1);
  for (size_t i = 1; i < plans.size(); ++i) {
    EXPECT_GE(plans[i - 1].time.tokens_per_s, plans[i].time.tokens_per_s);
    EXPECT_TRUE(plans[i].fits);
    EXPECT_EQ(plans[i].global_batch, 64);  // the layout never changes what is learned
  }
  for (size_t i = 0; i + 1 < plans.size() && i < 5; ++i) {
    const std::string why = why_it_wins(plans[i], &plans[i + 1]);
    EXPECT_NE(why.find(plans[i].time.tokens_per_s > plans[i + 1].time.tokens_per_s ? "faster"
                                                                                  : "as fast"),
              std::string::npos) << why;
  }
}

}  // namespace
}  // namespace partrain::planner
