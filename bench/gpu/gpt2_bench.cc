// One GPU's training throughput: tokens/s and MFU of GPT-2 124M (or a LLaMA-style model of
// the same size) at B=16, T=1024 in bf16, on synthetic tokens, one configuration per run:
//
//   partrain_gpu_bench [--mode layers|model] [--arch gpt2|llama] [--paths all|none|LIST]
//                      [--attention cudnn|gemm|flash|auto] [--overwrite 0|1]
//                      [--device-optimizer 0|1] [--graph 0|1] [--phases 0|1]
//                      [--batch 16] [--seq 1024] [--steps 10] [--warmup 3] [--label NAME]
//
// layers: the step written directly on the CUDA kernels (layers_step.h; llm.c style), GPT-2.
// model:  the engine's trainer path: engine::model::Model + train::AdamW on the CUDA backend
//         (model_bench.cc), GPT-2 or LLaMA; --paths and --attention become the backend's
//         PARTRAIN_CUDA_PATHS and PARTRAIN_CUDA_ATTENTION.
// --paths picks the kernel fast paths (engine/cuda/kernels.h KernelOptions; each falls back
// to the previous path), --phases adds one step timed per phase with CUDA events.
//
// Prints one JSON line per run on stdout (and one with the phase table), also when the run
// fails ("error": the reason), and exits 1 then: a ladder of runs records every outcome.
//
// MFU = achieved FLOP/s / 989.4e12, the H100/H200 SXM dense bf16 peak from NVIDIA's
// datasheet. FLOPs per token = 6 N + 12 L C T (nanoGPT's estimate_mfu: N excludes the
// position embeddings, and the input embedding where the LM head is not tied to it; the
// attention term counts the full T x T, not the causal half). bench/gpu/torch_peer.py
// counts the same way.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"

namespace partrain::bench {

namespace {
constexpr double kPeakBf16 = 989.4e12;

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}
}  // namespace

void report(const BenchArgs& a, const BenchResult& r) {
  std::string head = "{\"label\":\"" + escape(a.label) + "\",\"mode\":\"" + a.mode + "\",\"arch\":\"" + a.arch +
                     "\",\"paths\":\"" + escape(a.paths) + "\",\"attention\":\"" + escape(a.attention) +
                     "\",\"overwrite\":" + (a.overwrite ? "true" : "false") +
                     ",\"device_optimizer\":" + (a.device_optimizer ? "true" : "false") +
                     ",\"graph_requested\":" + (a.graph ? "true" : "false") + ",\"batch\":" + std::to_string(a.batch) +
                     ",\"seq\":" + std::to_string(a.seq) + ",\"steps\":" + std::to_string(a.steps);
  if (!r.error.empty()) {
    std::printf("%s,\"error\":\"%s\"}\n", head.c_str(), escape(r.error).c_str());
    std::fflush(stdout);
    return;
  }
  const double tokens = static_cast<double>(a.batch) * a.seq * a.steps;
  const double fpt = 6.0 * static_cast<double>(r.flops_params) + 12.0 * r.layers * r.channels * a.seq;
  const double tps = tokens / r.seconds;
  if (!r.attention_used.empty()) head += ",\"attention_used\":\"" + escape(r.attention_used) + "\"";
  std::printf("%s,\"graph\":%s,\"graph_error\":\"%s\",\"params_flops\":%lld,\"ms_per_step\":%.3f,"
              "\"tokens_per_s\":%.0f,\"tflops\":%.1f,\"mfu\":%.4f,\"loss_first\":%.4f,\"loss_last\":%.4f",
              head.c_str(), r.graph ? "true" : "false", escape(r.graph_error).c_str(),
              static_cast<long long>(r.flops_params), 1e3 * r.seconds / a.steps, tps, tps * fpt / 1e12,
              tps * fpt / kPeakBf16, r.loss_first, r.loss_last);
  for (const auto& [k, v] : r.extra) std::printf(",\"%s\":%lld", k.c_str(), static_cast<long long>(v));
  std::printf("}\n");
  if (!r.phases.empty()) {
    double total = 0.0;
    std::printf("{\"label\":\"%s\",\"phases_ms\":{", escape(a.label).c_str());
    for (size_t i = 0; i < r.phases.size(); ++i) {
      std::printf("%s\"%s\":%.3f", i ? "," : "", escape(r.phases[i].first).c_str(), r.phases[i].second);
      total += r.phases[i].second;
    }
    std::printf("},\"phase_total_ms\":%.3f}\n", total);
  }
  std::fflush(stdout);
}

}  // namespace partrain::bench

namespace {

bool flag(const char* v, bool* out) {
  const std::string s = v;
  if (s != "0" && s != "1") return false;
  *out = s == "1";
  return true;
}

bool parse(int argc, char** argv, partrain::bench::BenchArgs* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    bool ok = true;
    if (k == "--mode") a->mode = v;
    else if (k == "--arch") a->arch = v;
    else if (k == "--paths") a->paths = v;
    else if (k == "--attention") a->attention = v;
    else if (k == "--overwrite") ok = flag(v, &a->overwrite);
    else if (k == "--device-optimizer") ok = flag(v, &a->device_optimizer);
    else if (k == "--graph") ok = flag(v, &a->graph);
    else if (k == "--phases") ok = flag(v, &a->phases);
    else if (k == "--batch") a->batch = std::atoi(v);
    else if (k == "--seq") a->seq = std::atoi(v);
    else if (k == "--steps") a->steps = std::atoi(v);
    else if (k == "--warmup") a->warmup = std::atoi(v);
    else if (k == "--label") a->label = v;
    else return false;
    if (!ok) return false;
  }
  if (a->attention.empty()) a->attention = "auto";
  if (a->label.empty()) a->label = a->mode + "-" + a->arch + "-" + a->paths;
  return a->batch > 0 && a->seq > 0 && a->steps > 0 && a->warmup >= 0 &&
         (a->mode == "layers" || a->mode == "model") && (a->arch == "gpt2" || a->arch == "llama");
}

}  // namespace

int main(int argc, char** argv) {
  partrain::bench::BenchArgs a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: %s [--mode layers|model] [--arch gpt2|llama] [--paths all|none|LIST] "
                 "[--attention cudnn|gemm|flash|auto] [--overwrite 0|1] [--device-optimizer 0|1] "
                 "[--graph 0|1] [--phases 0|1] [--batch B] [--seq T] [--steps S] [--warmup W] [--label NAME]\n",
                 argv[0]);
    return 2;
  }
  // One fixed random batch; targets are the next tokens, so the loss can fall.
  const int vocab = a.arch == "gpt2" ? 50257 : 32000;
  const size_t n = static_cast<size_t>(a.batch) * a.seq;
  std::vector<int32_t> tok(n), tgt(n);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  for (size_t i = 0; i < n; ++i) tok[i] = d(rng);
  for (size_t i = 0; i < n; ++i) tgt[i] = i + 1 < n ? tok[i + 1] : d(rng);
  partrain::bench::BenchResult r;
  if (a.mode == "layers") {
    r = a.arch == "gpt2" ? partrain::bench::run_layers(a, tok, tgt)
                         : partrain::bench::BenchResult{.error = "layers mode is GPT-2 only; use --mode model"};
  } else {
#ifdef PARTRAIN_BENCH_MODEL
    r = partrain::bench::run_model(a, tok, tgt);
#else
    r.error = "model mode needs the engine (a build with fmt and nlohmann-json); use --mode layers";
#endif
  }
  partrain::bench::report(a, r);
  return r.error.empty() ? 0 : 1;
}
