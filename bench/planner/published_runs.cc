// The published runs and how each is planned (see published_runs.h).
#include "bench/planner/published_runs.h"

#include <cmath>
#include <map>

namespace partrain::bench {
namespace {

using planner::AttentionKernel;
using planner::Runtime;

// Megatron-LM and DeepSpeed before FlashAttention: scores materialized, attention dropout.
Runtime megatron_2021() {
  Runtime r;
  r.attention = AttentionKernel::kMaterialized;
  r.attention_dropout = true;
  r.tp_overlap = false;
  r.dp_overlap = true;
  r.pp_overlap = false;
  r.pp_scatter_gather = true;
  r.balanced_partition = false;
  r.grad_wire_bytes = 2;
  r.memory = planner::MemoryModel::kFramework;
  return r;
}

// Megatron-LM 2022: sequence parallelism, backward's collectives behind the other GEMM.
Runtime megatron_2022() {
  Runtime r = megatron_2021();
  r.tp_backward_overlap = true;
  return r;
}

Runtime deepspeed_pipe(bool balanced) {
  Runtime r = megatron_2021();
  r.dp_overlap = false;             // the pipeline engine reduces after the flush
  r.pp_scatter_gather = false;      // every tp rank sends the whole activation
  r.grad_accumulation_pass = true;  // fp32 accumulation outside the GEMM
  r.balanced_partition = balanced;
  return r;
}

// GPT-NeoX-20B: DeepSpeed's pipeline, no attention dropout (configs/20B.yml).
Runtime neox() {
  Runtime r = deepspeed_pipe(false);
  r.attention_dropout = false;
  return r;
}

Runtime megatron_core() {
  Runtime r;
  r.attention = AttentionKernel::kFused;
  r.tp_overlap = true;
  r.dp_overlap = true;
  r.param_gather_overlap = true;
  r.pp_overlap = true;
  r.pp_scatter_gather = true;
  r.balanced_partition = false;
  r.grad_wire_bytes = 4;
  r.grad_bucket_params = 40e6;  // Megatron-core's DDP bucket
  r.memory = planner::MemoryModel::kFramework;
  return r;
}

Runtime llama3() {
  Runtime r = megatron_core();
  r.tp_overlap = false;
  r.balanced_partition = true;  // one layer fewer on the first and last stage
  return r;
}

std::vector<Source> make_sources() {
  std::vector<Source> s;
  s.push_back({"sc21",
               "Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters "
               "Using Megatron-LM (SC'21, arXiv:2104.04473), Table 1; layouts, micro-batches and "
               "virtual stages from Megatron-LM examples/sc21/run_table_1.sh",
               "Megatron-LM 2021 on Selene (A100-80GB, 8 x 200 Gb/s HDR per node): materialized "
               "attention with dropout, tp all-reduces not overlapped, pipeline sends (scatter-"
               "gather) not overlapped, layers/(p v) per stage, fp16 gradients; torch DDP "
               "(overlapped) for pp1, Megatron's local DDP (after the flush) for pp > 1",
               "none: the configurations are the paper's scripts",
               megatron_2021(), FlopCount::kSc21});
  s.push_back({"mcore",
               "Megatron-LM README, Training Speed and Scalability: weak scaling of GPT models on "
               "H100 (images/model_table.png, Megatron-Core r0.8.0, July 2024)",
               "Megatron-Core r0.8 with Transformer Engine (H100, 8 x 400 Gb/s per node): "
               "FlashAttention, --tp-comm-overlap, --overlap-grad-reduce and --overlap-param-gather "
               "with the distributed optimizer (zero1, fp32 reduce-scatter), pipeline sends "
               "overlapped, layers/(p v) per stage",
               "micro-batch = the whole per-replica batch (4) when pp = 1, else 1; interleaved 1F1B "
               "with one layer per virtual stage (v = layers / pp, the only interleaving the 119B "
               "and 462B layouts admit); no recompute; sequence parallel",
               megatron_core(), FlopCount::kModel});
  s.push_back({"llama3",
               "Dubey et al., The Llama 3 Herd of Models (arXiv:2407.21783), Table 4 (405B on "
               "H100) and section 3.3.2",
               "Meta's 4D stack (H100, 400 Gb/s RoCE per GPU): FlashAttention, FSDP sharding "
               "gradients and optimizer (zero2) with fp32 reduce-scatter overlapped and parameters "
               "gathered ahead, interleaved pipeline with sends overlapped, one layer fewer on the "
               "first and last stage (cost-balanced), all-gather context parallelism; tp "
               "collectives not overlapped",
               "micro-batch 1; 7 virtual stages per rank (the published 7% drop from dp64 to "
               "dp128 rules out v <= 2); no recompute; FLOPs counted with causal attention "
               "(6 L T C per token): the paper does not give its formula",
               llama3(), FlopCount::kCausal});
  s.push_back({"mtnlg",
               "Smith et al., Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B "
               "(arXiv:2201.11990), section 2.4: 280, 350 and 420 DGX A100 nodes, global batch "
               "1920, 60.1, 50.2 and 44.4 s per iteration",
               "DeepSpeed pipeline engine with Megatron tensor parallelism on Selene: materialized "
               "attention with dropout, full recompute, 1F1B with blocking sends of the whole "
               "activation from every tp rank, gradients accumulated in a separate pass and "
               "reduced after the flush (ZeRO-1), layers/p per stage",
               "micro-batch 2: the paper does not state it; the three published times fit "
               "t = a (m + p - 1) with m = 1920 / (2 dp) exactly, and BLOOM's run of the same "
               "framework used 2",
               deepspeed_pipe(false), FlopCount::kSc21});
  s.push_back({"bloom",
               "BigScience, BLOOM 176B training (bigscience-workshop/bigscience, "
               "train/tr11-176B-ml/README.md): 384 A100-80GB on Jean Zay, 149.77 TFLOP/s at "
               "104.7 s per iteration",
               "Megatron-DeepSpeed as MT-NLG's, with the embeddings counted as a block in the "
               "stage partition (type:transformer|embedding, cost-balanced); Jean Zay's 4 x "
               "100 Gb/s Omni-Path per 8 GPUs (6 GB/s per GPU)",
               "none: the README gives layout, micro-batch, batch and the FLOP formula",
               deepspeed_pipe(true), FlopCount::kSc21});
  s.push_back({"korthikanti",
               "Korthikanti et al., Reducing Activation Recomputation in Large Transformer Models "
               "(MLSys 2023), Table 3 configurations; MFU as Megatron-LM's README (2022) reports "
               "them, measured with data-parallel size 1",
               "Megatron-LM 2022 on Selene: sequence parallelism with selective recompute, "
               "materialized attention with dropout, backward's tp collectives hidden behind "
               "the other gradient GEMM, pipeline sends not overlapped, layers/p per stage",
               "micro-batch 1; 1F1B without interleaving",
               megatron_2022(), FlopCount::kModel});
  s.push_back({"nemotron",
               "NVIDIA, Nemotron-4 340B Technical Report (arXiv:2406.11704), section 2.3 and Table 2: "
               "768 to 1536 DGX H100 nodes, 8-way tensor, 12-way pipeline parallelism with interleaving "
               "and data parallelism 16, 32, 64; iteration time and MFU per batch-size stage",
               "Megatron-core with Transformer Engine on DGX H100 (400 Gb/s per GPU): fused attention, "
               "sequence parallelism with tp communication overlap, distributed optimizer (zero1), "
               "interleaved 1F1B with sends overlapped",
               "4 virtual stages per rank (the report says interleaved, not how many; v = 4 fits the "
               "published 3% drop from m = 48 to m = 36 micro-batches); micro-batch 1; no recompute; the "
               "squared-ReLU MLP of width 73728 planned as a gated one of width 49152 (the same "
               "weights, FLOPs and activation bytes); model FLOPs counted as Megatron counts them",
               megatron_core(), FlopCount::kModel});
  s.push_back({"neox",
               "Black et al., GPT-NeoX-20B: An Open-Source Autoregressive Language Model "
               "(arXiv:2204.06745): 96 A100-SXM4-40GB, 117 TFLOP/s per GPU; configuration "
               "EleutherAI/gpt-neox configs/20B.yml",
               "GPT-NeoX (DeepSpeed pipeline engine, as MT-NLG's, without attention dropout), "
               "four 200 Gb/s HDR NICs per 8 GPUs (12 GB/s per GPU)",
               "FLOPs as GPT-NeoX's logger counts them (no vocabulary term); the parallel "
               "attention and MLP block and partial rotary embedding planned as a GPT block",
               neox(), FlopCount::kNeox});
  for (Source& f : fsdp_sources()) s.push_back(std::move(f));
  return s;
}

PublishedRun gpt(std::string name, std::string source, std::string profile, int vocab, int seq,
                 int layers, int hidden, int heads, std::string spec, int gpus, int global_batch,
                 int micro_batch, std::string recompute, double tflops) {
  PublishedRun r;
  r.name = std::move(name);
  r.source = std::move(source);
  r.profile = std::move(profile);
  r.arch = "gpt2";
  r.vocab = vocab, r.seq = seq, r.layers = layers, r.hidden = hidden, r.heads = heads;
  r.kv_heads = heads, r.ffn = 4 * hidden;
  r.spec = std::move(spec);
  r.gpus = gpus, r.global_batch = global_batch, r.micro_batch = micro_batch;
  r.recompute = std::move(recompute);
  r.published_tflops = tflops;
  return r;
}

std::vector<PublishedRun> make_runs() {
  std::vector<PublishedRun> runs;
  const char* a100 = "A100-80GB";
  // SC'21 Table 1 (GPT, V 51200, T 2048, full recompute).
  struct Sc21 { const char* name; int heads, hidden, layers; const char* spec; int gpus, batch, mb; double tf; };
  const Sc21 sc21[] = {
      {"GPT 1.7B", 24, 2304, 24, "tp1,pp1,dp32", 32, 512, 16, 137},
      {"GPT 3.6B", 32, 3072, 30, "tp2,pp1,dp32,nosp", 64, 512, 16, 138},
      {"GPT 7.5B", 32, 4096, 36, "tp4,pp1,dp32,nosp", 128, 512, 16, 142},
      {"GPT 18.4B", 48, 6144, 40, "tp8,pp1,dp32,nosp", 256, 1024, 8, 135},
      {"GPT 39.1B", 64, 8192, 48, "tp8,pp2,dp32,nosp", 512, 1536, 4, 138},
      {"GPT 76.1B", 80, 10240, 60, "tp8,pp4,dp32,nosp,sched=interleaved:3", 1024, 1792, 2, 140},
      {"GPT 145.6B", 96, 12288, 80, "tp8,pp8,dp24,nosp,sched=interleaved:2", 1536, 2304, 2, 148},
      {"GPT 310.1B", 128, 16384, 96, "tp8,pp16,dp15,nosp,sched=interleaved:2", 1920, 2160, 1, 155},
      {"GPT 529.6B", 128, 20480, 105, "tp8,pp35,dp9,nosp,sched=interleaved:3", 2520, 2520, 1, 163},
      {"GPT 1008B", 160, 25600, 128, "tp8,pp64,dp6,nosp", 3072, 3072, 1, 163},
  };
  for (const Sc21& r : sc21) {
    PublishedRun run = gpt(std::string("SC'21 ") + r.name, "sc21", a100, 51200, 2048, r.layers,
                           r.hidden, r.heads, r.spec, r.gpus, r.batch, r.mb, "full", r.tf);
    run.dp_overlap = std::string(r.spec).find("pp1,") != std::string::npos ? 1 : 0;
    runs.push_back(run);
  }
  // Megatron-Core r0.8 weak scaling (GPT, V 131072, T 4096, untied, dp48).
  struct Mcore { const char* name; int heads, hidden, layers; const char* spec; int gpus, batch, mb; double tf; };
  const Mcore mcore[] = {
      {"GPT 1.7B", 16, 2048, 24, "tp1,pp1,dp48,zero1", 48, 192, 4, 408.8},
      {"GPT 7.1B", 32, 4096, 30, "tp2,pp1,dp48,zero1,sp", 96, 192, 4, 465.9},
      {"GPT 16B", 48, 6144, 32, "tp4,pp1,dp48,zero1,sp", 192, 192, 4, 489.1},
      {"GPT 32B", 56, 7168, 48, "tp8,pp1,dp48,zero1,sp", 384, 192, 4, 459.6},
      {"GPT 70B", 64, 8192, 84, "tp8,pp2,dp48,zero1,sp,sched=interleaved:42", 768, 384, 1, 419.7},
      {"GPT 119B", 80, 10240, 92, "tp8,pp4,dp48,zero1,sp,sched=interleaved:23", 1536, 768, 1, 420.5},
      {"GPT 177B", 96, 12288, 96, "tp8,pp6,dp48,zero1,sp,sched=interleaved:16", 2304, 1152, 1, 432.8},
      {"GPT 314B", 128, 16384, 96, "tp8,pp8,dp48,zero1,sp,sched=interleaved:12", 3072, 1536, 1, 474.4},
      {"GPT 462B", 144, 18432, 112, "tp8,pp16,dp48,zero1,sp,sched=interleaved:7", 6144, 3072, 1, 459.9},
  };
  for (const Mcore& r : mcore) {
    PublishedRun run = gpt(std::string("Megatron-Core ") + r.name, "mcore", "H100-SXM", 131072, 4096,
                           r.layers, r.hidden, r.heads, r.spec, r.gpus, r.batch, r.mb, "none", r.tf);
    run.tied = false;
    runs.push_back(run);
  }
  // Llama 3 405B (Table 4).
  auto llama = [](std::string name, int seq, std::string spec, int gpus, int batch, double tf) {
    PublishedRun r;
    r.name = std::move(name);
    r.source = "llama3";
    r.profile = "H100-SXM";
    r.arch = "llama";
    r.vocab = 128256, r.seq = seq, r.layers = 126, r.hidden = 16384, r.heads = 128, r.kv_heads = 8;
    r.ffn = 53248, r.tied = false;
    r.recompute = "none";
    r.spec = std::move(spec);
    r.gpus = gpus, r.global_batch = batch, r.micro_batch = 1;
    r.published_tflops = tf;
    return r;
  };
  runs.push_back(llama("Llama 3 405B 8K dp64", 8192, "tp8,pp16,dp64,zero2,sp,sched=interleaved:7", 8192, 2048, 430));
  runs.back().memory_unverified =
      "Korthikanti's interleaved peak, p (1 + (p-1)/(p v)) micro-batches on the first stages, puts this "
      "layout without recompute at 78 GiB before margins; section 3.3.2 changes the schedule (a tunable "
      "number of micro-batches per round) and the stage balance for memory without saying by how much";
  runs.push_back(llama("Llama 3 405B 8K dp128", 8192, "tp8,pp16,dp128,zero2,sp,sched=interleaved:7", 16384, 2048, 400));
  PublishedRun long_context =
      llama("Llama 3 405B 128K cp16", 131072, "tp8,cp16,pp16,dp8,zero2,sp,sched=interleaved:7", 16384, 128, 380);
  long_context.cp_impl = "allgather";
  runs.push_back(long_context);
  // MT-NLG 530B (GPT, V 50272), tp8 pp35, global batch 1920.
  const int mt_dp[] = {8, 10, 12};
  const double mt_tf[] = {126, 121, 113};
  for (int i = 0; i < 3; ++i) {
    const int dp = mt_dp[i];
    runs.push_back(gpt("MT-NLG 530B dp" + std::to_string(dp), "mtnlg", a100, 50272, 2048, 105, 20480, 128,
                       "tp8,pp35,dp" + std::to_string(dp) + ",zero1,nosp", 280 * dp, 1920, 2, "full", mt_tf[i]));
  }
  // BLOOM 176B (V 250880, ALiBi).
  PublishedRun bloom = gpt("BLOOM 176B", "bloom", a100, 250880, 2048, 70, 14336, 112,
                           "tp4,pp12,dp8,zero1,nosp", 384, 2048, 2, "full", 149.77);
  bloom.nic_per_gpu = 6e9;
  runs.push_back(bloom);
  // Korthikanti et al. (GPT, V 51200, T 2048), dp1: MFU x 312 TFLOP/s.
  struct Ko { const char* name; int heads, hidden, layers; const char* spec; int gpus, batch; double mfu; };
  const Ko ko[] = {
      {"GPT 22B", 64, 6144, 48, "tp8,pp1,dp1,sp", 8, 4, 0.415},
      {"GPT 175B", 96, 12288, 96, "tp8,pp8,dp1,sp", 64, 64, 0.514},
      {"GPT 530B", 128, 20480, 105, "tp8,pp35,dp1,sp", 280, 280, 0.560},
      {"GPT 1T", 160, 25600, 128, "tp8,pp64,dp1,sp", 512, 512, 0.563},
  };
  for (const Ko& r : ko) {
    runs.push_back(gpt(std::string("Korthikanti ") + r.name, "korthikanti", a100, 51200, 2048, r.layers,
                       r.hidden, r.heads, r.spec, r.gpus, r.batch, 1,
                       "selective", r.mfu * 312));
  }
  // Nemotron-4 340B (Table 2): iteration seconds at each data-parallel size.
  struct Nemotron { int dp, gpus, batch; double seconds; const char* quote; };
  const Nemotron nemotron[] = {
      {16, 1536, 768, 10.3, "| 16 | 1536 | 10.3 | 42.4 | 768 |"},
      {32, 3072, 1536, 10.3, "| 32 | 3072 | 10.3 | 42.3 | 1536 |"},
      {64, 6144, 2304, 8.0, "| 64 | 6144 | 8.0 | 41.0 | 2304 |"},
  };
  for (const Nemotron& n : nemotron) {
    PublishedRun r;
    r.name = "Nemotron-4 340B dp" + std::to_string(n.dp);
    r.source = "nemotron";
    r.profile = "H100-SXM";
    r.arch = "llama";
    r.vocab = 256000, r.seq = 4096, r.layers = 96, r.hidden = 18432, r.heads = 96, r.kv_heads = 8;
    r.ffn = 49152, r.tied = false;
    r.recompute = "none";
    r.spec = "tp8,pp12,dp" + std::to_string(n.dp) + ",zero1,sp,sched=interleaved:4";
    r.gpus = n.gpus, r.global_batch = n.batch, r.micro_batch = 1;
    r.published_tokens_per_gpu = n.batch * 4096.0 / n.seconds / n.gpus;
    r.quote = std::string("Table 2 (data-parallel size | GPUs | iteration time (secs) | MFU (%) | batch size): ") + n.quote;
    runs.push_back(r);
  }
  for (PublishedRun& r : fsdp_runs()) runs.push_back(std::move(r));
  // GPT-NeoX-20B (V 50432 padded, untied).
  PublishedRun neox = gpt("GPT-NeoX 20B", "neox", "A100-40GB", 50432, 2048, 44, 6144, 64,
                          "tp2,pp4,dp12,zero1,nosp", 96, 1536, 4, "full", 117);
  neox.tied = false;
  neox.nic_per_gpu = 12e9;
  neox.excluded =
      "the paper does not say how it counts its 117 TFLOP/s, and its 150k steps of 3.15M "
      "tokens in the reported 1830 hours on 96 GPUs make at least 125 TFLOP/s in SC'21's count";
  runs.push_back(neox);
  return runs;
}

}  // namespace

const std::vector<Source>& sources() {
  static const std::vector<Source> s = make_sources();
  return s;
}

const std::vector<PublishedRun>& published_runs() {
  static const std::vector<PublishedRun> r = [] {
    std::vector<PublishedRun> runs = make_runs();
    std::map<std::string, int> seen;
    for (PublishedRun& run : runs) {
      if (!run.excluded.empty()) continue;
      run.half = seen[run.source]++ % 2 == 0 ? Half::kCalibration : Half::kHeldOut;
      if (run.published_tokens_per_gpu > 0) {
        run.published_tflops = run.published_tokens_per_gpu * source_flops_per_token(run) / 1e12;
      }
    }
    return runs;
  }();
  return r;
}

const Source& source_of(const PublishedRun& run) {
  for (const Source& s : sources()) {
    if (s.key == run.source) return s;
  }
  return sources().front();
}

Result<config::JobConfig> job_of(const PublishedRun& r) {
  std::string text = "[model]\narch = \"" + r.arch + "\"\nvocab_size = " + std::to_string(r.vocab) +
                     "\nseq_len = " + std::to_string(r.seq) + "\nlayers = " + std::to_string(r.layers) +
                     "\nhidden = " + std::to_string(r.hidden) + "\nheads = " + std::to_string(r.heads) +
                     "\nkv_heads = " + std::to_string(r.kv_heads) + "\nffn_hidden = " + std::to_string(r.ffn) +
                     "\ntie_embeddings = " + (r.tied ? "true" : "false") + "\nrecompute = \"" + r.recompute +
                     "\"\n[data]\ntrain_files = [\"published.bin\"]\n[training]\nglobal_batch = " +
                     std::to_string(r.global_batch) + "\nmicro_batch = " + std::to_string(r.micro_batch) +
                     "\n[parallelism]\nspec = \"" + r.spec + "\"\n";
  return config::parse_job(text, r.name + ".toml");
}

Result<planner::HardwareProfile> profile_of(const PublishedRun& run, const std::string& dir) {
  Result<planner::HardwareProfile> hw = planner::load_hardware(run.profile, dir);
  if (!hw) return hw;
  if (run.nic_per_gpu > 0) hw->inter_bandwidth = hw->inter_switch_bandwidth = run.nic_per_gpu;
  return hw;
}

double source_flops_per_token(const PublishedRun& r) {
  const double L = r.layers, h = r.hidden, s = r.seq, V = r.vocab;
  const Source& src = source_of(r);
  if (src.count == FlopCount::kParams) {
    Result<config::JobConfig> job = job_of(r);
    if (!job) return 0;
    return 6 * planner::count_params(planner::model_dims(job->model)).total + 12 * L * s * h;
  }
  if (src.count == FlopCount::kSc21) return 96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
  if (src.count == FlopCount::kNeox) return 96 * L * h * h * (1 + s / (6 * h));
  const double hd = h / r.heads;
  const double ffn = r.arch == "llama" ? 3.0 * r.ffn * h : 2.0 * r.ffn * h;
  const double matmul = L * ((r.heads + 2.0 * r.kv_heads) * hd * h + r.heads * hd * h + ffn) + V * h;
  return 6 * matmul + (src.count == FlopCount::kCausal ? 6 : 12) * L * s * h;
}

namespace {

Prediction finish(const PublishedRun& run, planner::Plan plan, const planner::HardwareProfile& hw) {
  Prediction p;
  p.tflops = plan.time.tokens_per_s_per_gpu * source_flops_per_token(run) / 1e12;
  p.mfu = plan.time.mfu;
  // The published number in model FLOPs: the source's count scaled to the planner's.
  const double model = plan.time.model_flops_per_gpu / plan.time.tokens_per_s_per_gpu;
  p.published_mfu = run.published_tflops * 1e12 / source_flops_per_token(run) * model / hw.peak();
  p.error = run.published_tokens_per_gpu > 0
                ? plan.time.tokens_per_s_per_gpu / run.published_tokens_per_gpu - 1
                : p.tflops / run.published_tflops - 1;
  p.plan = std::move(plan);
  return p;
}

}  // namespace

Result<Prediction> predict(const PublishedRun& run, const planner::HardwareProfile& hw) {
  Result<config::JobConfig> job = job_of(run);
  if (!job) return job.status();
  planner::PlanOptions options;
  options.runtime = source_of(run).runtime;
  if (run.dp_overlap >= 0) options.runtime->dp_overlap = run.dp_overlap == 1;
  if (run.grad_wire_bytes > 0) options.runtime->grad_wire_bytes = run.grad_wire_bytes;
  options.context_plugin = run.cp_impl;
  const planner::Cluster cluster{run.gpus / hw.gpus_per_node, hw.gpus_per_node};
  Result<planner::Plan> plan = planner::make_plan(*job, cluster, hw, nullptr, options);
  if (!plan) return plan.status();
  return finish(run, std::move(plan).value(), hw);
}

Prediction retime(const PublishedRun& run, const Prediction& p, const planner::HardwareProfile& hw) {
  planner::Plan plan = p.plan;
  planner::StepInputs in;
  in.model = plan.model;
  in.params = plan.params;
  in.layout = plan.layout;
  in.precision = plan.precision;
  in.runtime = plan.runtime;
  in.spans = plan.spans;
  plan.time = planner::predict_step(in, hw);
  return finish(run, std::move(plan), hw);
}

}  // namespace partrain::bench
