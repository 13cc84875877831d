// Published runs of FSDP (ZeRO-3) frameworks: MosaicML's llm-foundry benchmark tables (MPT
// models on H100 and A100) and torchtitan's Llama numbers on A100. Each row quotes its
// table row; see published_runs.h.
#include <string>
#include <utility>

#include "bench/planner/published_runs.h"

namespace partrain::bench {
namespace {

using planner::AttentionKernel;
using planner::MemoryModel;
using planner::Runtime;

// PyTorch FSDP (FULL_SHARD): parameters gathered per block ahead of the compute (forward
// and backward prefetch), gradients reduce-scattered after every micro-batch, torch SDPA
// or the flash-attn package (FlashAttention-2 class kernels), no tensor parallelism.
Runtime fsdp() {
  Runtime r;
  r.attention = AttentionKernel::kFusedFa2;
  r.dp_overlap = true;
  r.reduce_every_micro_batch = true;
  r.balanced_partition = false;
  r.grad_wire_bytes = 4;
  r.memory = MemoryModel::kFramework;
  return r;
}

// Composer's FSDP1 defaults (backward_prefetch BACKWARD_POST) and the fused cross entropy
// of the MPT yamls (loss_fn: fused_crossentropy).
Runtime composer() {
  Runtime r = fsdp();
  r.zero3_backward_prefetch = false;
  r.fused_cross_entropy = true;
  return r;
}

constexpr const char* kFoundryCommit = "mosaicml/llm-foundry@061f2c7c, scripts/train/benchmarking/README.md";

struct Mpt {
  const char* size;
  int hidden, heads, layers;
};
// The MPT shapes of llm-foundry's yamls (d_model, n_heads, n_layers; expansion ratio 4,
// vocabulary 50368, learned positions, tied embedding, no biases): the table's NumParams
// column is 12 L d^2 + (V + T) d and the norms for each.
constexpr Mpt kMpt[] = {{"125m", 768, 12, 12},  {"350m", 1024, 16, 24}, {"760m", 1536, 12, 24},
                        {"1b", 2048, 16, 24},   {"3b", 2560, 20, 32},   {"7b", 4096, 32, 32},
                        {"13b", 5120, 40, 40},  {"30b", 7168, 56, 48},  {"70b", 8192, 64, 80}};

// One row of the table: model, seq, GPUs, micro-batch, grad accumulation, activation
// checkpointing, tokens/s/GPU, and the mixed-precision mode (PURE: bf16 reductions).
struct FoundryRow {
  const char* size;
  int seq, gpus, micro, accum;
  bool checkpointing;
  double tokens;
  bool pure;
  const char* quote;
};

PublishedRun mpt(const FoundryRow& r, const char* profile, double nic) {
  const Mpt* shape = nullptr;
  for (const Mpt& m : kMpt) {
    if (std::string(m.size) == r.size) shape = &m;
  }
  PublishedRun run;
  run.name = std::string("MPT ") + r.size + " T" + std::to_string(r.seq) + " " + std::to_string(r.gpus) +
             "x" + (std::string(profile).rfind("H100", 0) == 0 ? "H100" : profile);
  run.source = "llmfoundry";
  run.profile = profile;
  run.nic_per_gpu = nic;
  run.arch = "gpt2";
  run.vocab = 50368, run.seq = r.seq, run.layers = shape->layers, run.hidden = shape->hidden;
  run.heads = shape->heads, run.kv_heads = shape->heads, run.ffn = 4 * shape->hidden;
  run.tied = true;
  run.recompute = r.checkpointing ? "full" : "none";
  run.spec = "dp" + std::to_string(r.gpus) + ",zero3";
  run.gpus = r.gpus;
  run.micro_batch = r.micro;
  run.global_batch = r.micro * r.accum * r.gpus;
  run.published_tokens_per_gpu = r.tokens;
  run.grad_wire_bytes = r.pure ? 2 : 4;
  run.quote = r.quote;
  return run;
}

}  // namespace

std::vector<Source> fsdp_sources() {
  std::vector<Source> s;
  s.push_back({"llmfoundry",
               std::string("MosaicML llm-foundry, MPT Training Benchmarks (") + kFoundryCommit +
                   "): tables \"H100 80GB BF16\", \"A100 80GB with 1600 Gbps node-node interconnect "
                   "(RoCE)\" and \"A100 40GB with 1600 Gbps ...\"; each row gives model, sequence length, "
                   "GPUs, micro-batch, gradient accumulation, activation checkpointing and tokens/s/GPU",
               "Composer with PyTorch FSDP FULL_SHARD (ZeRO-3: blocks gathered ahead, gradients "
               "reduce-scattered every micro-batch, fp32 reductions in amp_bf16 DEFAULT, bf16 in PURE), "
               "the Triton flash attention (submit_benchmarks.py's --attn_impl default 'triton'), activation "
               "checkpointing = full recompute, "
               "backward prefetch BACKWARD_POST (Composer's default: a block's gather starts after the "
               "gradients of the one before), fused cross entropy",
               "the Triton flash attention planned as a FlashAttention-2 class kernel (its rate is not "
               "published); MPT shapes from the llm-foundry yamls (GPT blocks with learned positions and a tied "
               "embedding); the H100 cluster's network is not stated: the profile's 400 Gb/s per GPU; "
               "1600 Gbps per node for the A100 rows (25 GB/s per GPU)",
               composer(), FlopCount::kParams});
  s.push_back({"torchtitan",
               "pytorch/torchtitan@04133643, docs/performance.md: \"Llama 3 performance numbers\" and "
               "\"Llama 2 performance numbers\", FSDP2 on 64 A100 (80GB)",
               "torchtitan FSDP2 (ZeRO-3, fp32 reduce-scatter, parameters prefetched per block), torch "
               "SDPA (the flash backend, FlashAttention-2), no tensor parallelism",
               "sequence length: torchtitan's defaults for the models (Llama 3 8192, Llama 2 4096); the "
               "network: the profile's 200 Gb/s per GPU; WPS is per GPU (its MFU column checks: 331 x "
               "(6 N + 12 L T C) / 312e12 = 51.7%); rows with selective (op or layer) checkpointing "
               "are left out: their recompute is neither Megatron's selective nor full",
               fsdp(), FlopCount::kParams});
  return s;
}

std::vector<PublishedRun> fsdp_runs() {
  std::vector<PublishedRun> runs;
  // H100 80GB BF16 (amp_bf16 DEFAULT).
  const FoundryRow h100[] = {
      {"70b", 2048, 64, 8, 4, true, 1039, false, "|  70b | 2048 | 64 | h100_80gb | 42.57 | 56.76 | ... | 8 | 4 | 2048 | 32 | 66523 | 1039 | ... | True |"},
      {"30b", 2048, 32, 14, 3, true, 2308, false, "|  30b | 2048 | 32 | h100_80gb | 43.92 | 58.57 | ... | 14 | 3 | 1344 | 36 | 73860 | 2308 | ... | True |"},
      {"13b", 2048, 64, 2, 1, false, 4800, false, "|  13b | 2048 | 64 | h100_80gb | 39.86 | 39.86 | ... | 2 | 1 | 128 | 150 | 307209 | 4800 | ... | False |"},
      {"13b", 4096, 8, 10, 3, true, 4717, false, "|  13b | 4096 | 8 | h100_80gb | 41.6 | 55.47 | ... | 10 | 3 | 240 | 9 | 37740 | 4717 | ... | True |"},
      {"7b", 2048, 8, 6, 1, false, 10643, false, "|  7b | 2048 | 8 | h100_80gb | 46.44 | 46.44 | ... | 6 | 1 | 48 | 41 | 85144 | 10643 | ... | False |"},
      {"7b", 8192, 8, 8, 2, true, 6935, false, "|  7b | 8192 | 8 | h100_80gb | 37.14 | 49.52 | ... | 8 | 2 | 128 | 6 | 55481 | 6935 | ... | True |"},
      {"3b", 2048, 64, 6, 3, false, 22525, false, "|  3b | 2048 | 64 | h100_80gb | 40.8 | 40.8 | ... | 6 | 3 | 1152 | 703 | 1441663 | 22525 | ... | False |"},
      {"3b", 8192, 8, 3, 6, false, 16578, false, "|  3b | 8192 | 8 | h100_80gb | 40.31 | 40.31 | ... | 3 | 6 | 144 | 16 | 132626 | 16578 | ... | False |"},
      {"1b", 2048, 64, 20, 1, false, 44402, false, "|  1b | 2048 | 64 | h100_80gb | 40.85 | 40.85 | ... | 20 | 1 | 1280 | 1387 | 2841754 | 44402 | ... | False |"},
      {"1b", 8192, 8, 3, 4, false, 29157, false, "|  1b | 8192 | 8 | h100_80gb | 37.73 | 37.73 | ... | 3 | 4 | 96 | 28 | 233256 | 29157 | ... | False |"},
      {"760m", 2048, 32, 24, 1, false, 67971, false, "|  760m | 2048 | 32 | h100_80gb | 37.57 | 37.57 | ... | 24 | 1 | 768 | 1062 | 2175091 | 67971 | ... | False |"},
      {"760m", 4096, 8, 12, 2, false, 55459, false, "|  760m | 4096 | 8 | h100_80gb | 35.83 | 35.83 | ... | 12 | 2 | 192 | 108 | 443674 | 55459 | ... | False |"},
  };
  for (const FoundryRow& r : h100) runs.push_back(mpt(r, "H100-SXM", 0));
  // A100 80GB, 1600 Gbps per node (amp_bf16 DEFAULT, the 70B row bf16 PURE).
  const FoundryRow a100[] = {
      {"70b", 2048, 64, 8, 4, true, 410, true, "|  70b | 2048 | 64 | a100_80gb | 53.33 | 71.1 | ... | 8 | 4 | 2048 | 12 | 26274 | 410 | ... | bf16 | PURE | FULL_SHARD | True |"},
      {"30b", 2048, 8, 3, 21, true, 916, false, "|  30b | 2048 | 8 | a100_80gb | 55.3 | 73.74 | ... | 3 | 21 | 504 | 3 | 7330 | 916 | ... | True |"},
      {"13b", 2048, 8, 2, 3, false, 2262, false, "|  13b | 2048 | 8 | a100_80gb | 59.57 | 59.57 | ... | 2 | 3 | 48 | 8 | 18097 | 2262 | ... | False |"},
      {"13b", 8192, 8, 5, 3, true, 1795, false, "|  13b | 8192 | 8 | a100_80gb | 56.07 | 74.76 | ... | 5 | 3 | 120 | 1 | 14362 | 1795 | ... | True |"},
      {"7b", 2048, 8, 6, 2, false, 4641, false, "|  7b | 2048 | 8 | a100_80gb | 64.23 | 64.23 | ... | 6 | 2 | 96 | 18 | 37130 | 4641 | ... | False |"},
      {"7b", 16384, 8, 4, 2, true, 2453, false, "|  7b | 16384 | 8 | a100_80gb | 51.96 | 69.28 | ... | 4 | 2 | 64 | 1 | 19629 | 2453 | ... | True |"},
      {"3b", 4096, 8, 5, 6, false, 9457, false, "|  3b | 4096 | 8 | a100_80gb | 60.53 | 60.53 | ... | 5 | 6 | 240 | 18 | 75658 | 9457 | ... | False |"},
      {"1b", 2048, 8, 14, 4, false, 20513, false, "|  1b | 2048 | 8 | a100_80gb | 59.86 | 59.86 | ... | 14 | 4 | 448 | 80 | 164109 | 20513 | ... | False |"},
      {"350m", 2048, 8, 32, 2, false, 58782, false, "|  350m | 2048 | 8 | a100_80gb | 51.62 | 51.62 | ... | 32 | 2 | 512 | 229 | 470263 | 58782 | ... | False |"},
      {"125m", 2048, 8, 40, 2, false, 142830, false, "|  125m | 2048 | 8 | a100_80gb | 44.79 | 44.79 | ... | 40 | 2 | 640 | 557 | 1142641 | 142830 | ... | False |"},
  };
  for (const FoundryRow& r : a100) runs.push_back(mpt(r, "A100-80GB", 25e9));
  // A100 40GB, 1600 Gbps per node (bf16 PURE).
  const FoundryRow a100_40[] = {
      {"70b", 2048, 128, 4, 1, true, 376, true, "|  70b | 2048 | 128 | a100_40gb | 48.91 | 65.21 | ... | 4 | 1 | 512 | 23 | 48194 | 376 | ... | True |"},
      {"30b", 2048, 128, 6, 1, true, 865, true, "|  30b | 2048 | 128 | a100_40gb | 52.25 | 69.66 | ... | 6 | 1 | 768 | 54 | 110803 | 865 | ... | True |"},
      {"13b", 2048, 128, 16, 1, true, 1972, true, "|  13b | 2048 | 128 | a100_40gb | 51.93 | 69.24 | ... | 16 | 1 | 2048 | 123 | 252444 | 1972 | ... | True |"},
      {"13b", 2048, 16, 10, 1, true, 1993, true, "|  13b | 2048 | 16 | a100_40gb | 52.5 | 70.0 | ... | 10 | 1 | 160 | 15 | 31900 | 1993 | ... | True |"},
      {"7b", 2048, 64, 18, 1, true, 3665, true, "|  7b | 2048 | 64 | a100_40gb | 50.73 | 67.64 | ... | 18 | 1 | 1152 | 114 | 234614 | 3665 | ... | True |"},
      {"3b", 2048, 128, 6, 1, false, 9538, true, "|  3b | 2048 | 128 | a100_40gb | 54.8 | 54.8 | ... | 6 | 1 | 768 | 596 | 1220885 | 9538 | ... | False |"},
      {"1b", 2048, 128, 10, 1, false, 18647, true, "|  1b | 2048 | 128 | a100_40gb | 54.41 | 54.41 | ... | 10 | 1 | 1280 | 1165 | 2386897 | 18647 | ... | False |"},
      {"760m", 2048, 16, 12, 1, false, 29607, true, "|  760m | 2048 | 16 | a100_40gb | 51.9 | 51.9 | ... | 12 | 1 | 192 | 231 | 473723 | 29607 | ... | False |"},
      {"350m", 2048, 128, 18, 1, false, 51934, true, "|  350m | 2048 | 128 | a100_40gb | 45.61 | 45.61 | ... | 18 | 1 | 2304 | 3245 | 6647647 | 51934 | ... | False |"},
      {"125m", 2048, 64, 26, 1, false, 125234, true, "|  125m | 2048 | 64 | a100_40gb | 39.27 | 39.27 | ... | 26 | 1 | 1664 | 3913 | 8015010 | 125234 | ... | False |"},
  };
  for (const FoundryRow& r : a100_40) runs.push_back(mpt(r, "A100-40GB", 25e9));

  // torchtitan on 64 A100 80GB, local batch size = micro-batch, global = 64 x it.
  auto llama = [](std::string name, int seq, int vocab, int hidden, int layers, int heads, int kv, int ffn,
                  int local, const char* recompute, double wps, const char* quote) {
    PublishedRun r;
    r.name = std::move(name);
    r.source = "torchtitan";
    r.profile = "A100-80GB";
    r.arch = "llama";
    r.vocab = vocab, r.seq = seq, r.layers = layers, r.hidden = hidden, r.heads = heads, r.kv_heads = kv;
    r.ffn = ffn, r.tied = false;
    r.recompute = recompute;
    r.spec = "dp64,zero3";
    r.gpus = 64, r.micro_batch = local, r.global_batch = 64 * local;
    r.published_tokens_per_gpu = wps;
    r.quote = quote;
    return r;
  };
  runs.push_back(llama("torchtitan Llama 3 70B", 8192, 128256, 8192, 80, 64, 8, 28672, 1, "full", 331,
                       "| 70B | 1 | full | 331 | 51.7% |"));
  runs.push_back(llama("torchtitan Llama 2 13B", 4096, 32000, 5120, 40, 40, 40, 13824, 2, "none", 2162,
                       "| 13B | 2 | no | 2162 | 61.1% |"));
  runs.push_back(llama("torchtitan Llama 2 70B", 4096, 32000, 8192, 80, 64, 8, 28672, 2, "full", 353,
                       "| 70B | 2 | full | 353 | 50.5% |"));
  return runs;
}

}  // namespace partrain::bench
