// GPT-2 124M bf16 training throughput on one GPU: tokens/s and MFU on synthetic tokens.
//
//   partrain_gpu_bench [--mode layers|model|both] [--batch 16] [--seq 1024] [--steps 10]
//                      [--attention gemm|flash]   (model mode's attention path)
//
// layers: the step written directly on the CUDA kernels (layers_step.h; llm.c style).
// model:  the engine's real trainer path: engine::model::Model + train::AdamW on the CUDA
//         backend (only in builds that have the engine).
// Shape: 12 layers, 768 channels, 12 heads, vocab 50257 padded to 50304 (model mode trains
// all 50304 logits: the engine has no padded-vocabulary notion). One fixed random batch is
// repeated, so the loss must fall: a cheap check that the step learns.
//
// MFU = achieved FLOP/s / 989.4e12, the H100/H200 SXM dense bf16 peak from NVIDIA's
// datasheet. FLOPs per token = 6 N + 12 L C T (nanoGPT's estimate_mfu: N excludes the
// position embeddings; the attention term counts the full T x T, not the causal half).
// Prints one JSON line per mode on stdout.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "layers_step.h"

#ifdef PARTRAIN_BENCH_MODEL
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/model/model.h"
#include "engine/options.h"
#include "engine/train/optimizer.h"
#endif

namespace {

constexpr double kPeakBf16 = 989.4e12;

struct Args {
  std::string mode = "both";
  std::string attention = "gemm";
  int batch = 16, seq = 1024, steps = 10, warmup = 3;
};

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (k == "--mode") a->mode = v;
    else if (k == "--batch") a->batch = std::atoi(v);
    else if (k == "--seq") a->seq = std::atoi(v);
    else if (k == "--steps") a->steps = std::atoi(v);
    else if (k == "--warmup") a->warmup = std::atoi(v);
    else if (k == "--attention") a->attention = v;
    else return false;
  }
  return a->batch > 0 && a->seq > 0 && a->steps > 0 && a->warmup >= 0 &&
         (a->attention == "gemm" || a->attention == "flash");
}

void report(const char* mode, const Args& a, double seconds, int64_t n_params, int L, int C,
            float loss_first, float loss_last) {
  const double tokens = static_cast<double>(a.batch) * a.seq * a.steps;
  const double flops_per_token = 6.0 * static_cast<double>(n_params) + 12.0 * L * C * a.seq;
  const double tps = tokens / seconds;
  std::printf(
      "{\"mode\":\"%s\",\"batch\":%d,\"seq\":%d,\"steps\":%d,\"params_no_pos\":%lld,"
      "\"ms_per_step\":%.2f,\"tokens_per_s\":%.0f,\"tflops\":%.1f,\"mfu\":%.4f,"
      "\"peak_tflops\":%.1f,\"loss_first\":%.4f,\"loss_last\":%.4f}\n",
      mode, a.batch, a.seq, a.steps, static_cast<long long>(n_params), 1e3 * seconds / a.steps, tps,
      tps * flops_per_token / 1e12, tps * flops_per_token / kPeakBf16, kPeakBf16 / 1e12,
      loss_first, loss_last);
  std::fflush(stdout);
}

int run_layers(const Args& a, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt) {
  partrain::bench::Gpt2Shape shape;
  shape.seq = a.seq;
  auto g = partrain::bench::KernelGpt2::create(shape, a.batch, 1337);
  if (!g) {
    std::fprintf(stderr, "layers: %s\n", g.status().message().c_str());
    return 1;
  }
  float first = 0, last = 0;
  int64_t t = 0;
  for (int i = 0; i < a.warmup; ++i) {
    auto l = (*g)->step(tok, tgt, 3e-4f, ++t);
    if (!l) {
      std::fprintf(stderr, "layers: %s\n", l.status().message().c_str());
      return 1;
    }
    if (i == 0) first = *l;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) {
    auto l = (*g)->step(tok, tgt, 3e-4f, ++t);
    if (!l) {
      std::fprintf(stderr, "layers: %s\n", l.status().message().c_str());
      return 1;
    }
    if (t == 1) first = *l;
    last = *l;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report("layers", a, s, (*g)->num_params_no_pos(), shape.layers, shape.channels, first, last);
  return 0;
}

#ifdef PARTRAIN_BENCH_MODEL
int run_model(const Args& a, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt) {
  using namespace partrain::engine;
  setenv("PARTRAIN_CUDA_ATTENTION", a.attention.c_str(), 1);
  auto be = make_cuda_backend(0, DType::kBF16);
  if (!be) {
    std::fprintf(stderr, "model: %s\n", be.status().message().c_str());
    return 1;
  }
  ModelOptions mo;
  mo.arch = Arch::kGpt2;
  mo.vocab_size = 50304;
  mo.seq_len = a.seq;
  mo.layers = 12;
  mo.hidden = 768;
  mo.heads = 12;
  mo.tie_embeddings = true;
  auto m = model::Model::create(mo, be->get(), a.batch, 1337);
  if (!m) {
    std::fprintf(stderr, "model: %s\n", m.status().message().c_str());
    return 1;
  }
  TrainOptions to;
  auto opt = train::AdamW::create(m->get(), to);
  if (!opt) {
    std::fprintf(stderr, "model: %s\n", opt.status().message().c_str());
    return 1;
  }
  float first = 0, last = 0;
  auto one = [&](int64_t step) -> bool {
    (*m)->zero_grads();
    model::MicroBatch mb{tok.data(), tgt.data(), a.batch, 0, step};
    auto l = (*m)->forward(mb);
    if (!l) {
      std::fprintf(stderr, "model: %s\n", l.status().message().c_str());
      return false;
    }
    (*m)->backward(1.0f);
    (*opt)->step(3e-4f);
    if (step == 0) first = l->loss;
    last = l->loss;
    return true;
  };
  int64_t step = 0;
  for (int i = 0; i < a.warmup; ++i)
    if (!one(step++)) return 1;
  (*be)->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i)
    if (!one(step++)) return 1;
  (*be)->synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto* cb = dynamic_cast<cuda::CudaBackend*>(be->get());
  if (cb != nullptr && !cb->status().is_ok()) {
    std::fprintf(stderr, "model: %s\n", cb->status().message().c_str());
    return 1;
  }
  const int64_t C = 768, L = 12;
  const int64_t n_no_pos = 50257 * C + L * (12 * C * C + 13 * C) + 2 * C;  // same count as layers
  report(a.attention == "flash" ? "model-flash" : "model", a, s, n_no_pos, static_cast<int>(L), static_cast<int>(C), first, last);
  const auto& mem = (*be)->memory();
  std::printf("{\"mode\":\"model\",\"peak_bytes\":{\"weights\":%zu,\"grads\":%zu,\"optimizer\":%zu,"
              "\"activations\":%zu,\"workspace\":%zu,\"total\":%zu}}\n",
              mem.peak[0], mem.peak[1], mem.peak[2], mem.peak[3], mem.peak[4], mem.peak_total);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: %s [--mode layers|model|both] [--batch B] [--seq T] [--steps S] "
                 "[--warmup W] [--attention gemm|flash]\n",
                 argv[0]);
    return 2;
  }
  const size_t n = static_cast<size_t>(a.batch) * a.seq;
  std::vector<int32_t> tok(n), tgt(n);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> d(0, 50256);
  for (size_t i = 0; i < n; ++i) tok[i] = d(rng);
  for (size_t i = 0; i < n; ++i) tgt[i] = i + 1 < n ? tok[i + 1] : d(rng);
  int rc = 0;
  if (a.mode == "layers" || a.mode == "both") rc |= run_layers(a, tok, tgt);
#ifdef PARTRAIN_BENCH_MODEL
  if (a.mode == "model" || a.mode == "both") rc |= run_model(a, tok, tgt);
#else
  if (a.mode == "model") {
    std::fprintf(stderr, "model mode needs the engine (a build with fmt); use --mode layers\n");
    return 2;
  }
#endif
  return rc;
}
