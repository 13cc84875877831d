// The model mode of the GPU benchmark: the engine's own path, engine::model::Model and
// train::AdamW on the CUDA backend, GPT-2 124M or a LLaMA-style model of the same size:
//   gpt2:  12 layers, 768 wide, 12 heads, vocab 50304 (GPT-2's 50257 padded to a multiple
//          of 128, as nanoGPT trains it; the engine softmaxes all of them), tied head
//   llama: 12 layers, 768 wide, 12 heads, 4 kv heads, SwiGLU 2048, vocab 32000, untied
//          head, RoPE theta 10000, RMSNorm (about 125M parameters)
// bench/gpu/torch_peer.py builds the same two models. One step = zero_grads, forward,
// backward, AdamW (lr 3e-4, decay 0.1, clip 1.0).
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/nvtx.h"
#include "engine/model/model.h"
#include "engine/options.h"
#include "engine/train/optimizer.h"

namespace partrain::bench {

using namespace partrain::engine;

BenchResult run_model(const BenchArgs& a, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt) {
  BenchResult r;
  setenv("PARTRAIN_CUDA_PATHS", a.paths.c_str(), 1);
  setenv("PARTRAIN_CUDA_ATTENTION", a.attention.c_str(), 1);
  auto be = make_cuda_backend(0, DType::kBF16);
  if (!be) {
    r.error = be.status().message();
    return r;
  }
  auto* cb = dynamic_cast<cuda::CudaBackend*>(be->get());
  ModelOptions mo;
  mo.seq_len = a.seq;
  mo.layers = 12;
  mo.hidden = 768;
  mo.heads = 12;
  if (a.arch == "gpt2") {
    mo.arch = Arch::kGpt2;
    mo.vocab_size = 50304;
    mo.tie_embeddings = true;
  } else {
    mo.arch = Arch::kLlama;
    mo.vocab_size = 32000;
    mo.kv_heads = 4;
    mo.ffn_hidden = 2048;
    mo.tie_embeddings = false;
  }
  auto m = model::Model::create(mo, be->get(), a.batch, 1337);
  if (!m) {
    r.error = m.status().message();
    return r;
  }
  TrainOptions to;
  auto opt = train::AdamW::create(m->get(), to);
  if (!opt) {
    r.error = opt.status().message();
    return r;
  }
  const int64_t C = mo.hidden, V = mo.vocab_size;
  r.layers = mo.layers;
  r.channels = mo.hidden;
  r.flops_params = (*m)->num_params() - (a.arch == "gpt2" ? a.seq * C : V * C);  // no positions / input embedding
  auto one = [&](int64_t step, float* loss) -> Status {
    (*m)->zero_grads();
    model::MicroBatch mb{tok.data(), tgt.data(), a.batch, 0, step};
    Result<model::LossParts> l = [&] {
      cuda::NvtxRange range("forward");
      return (*m)->forward(mb);
    }();
    if (!l) return l.status();
    {
      cuda::NvtxRange range("backward");
      (*m)->backward(1.0f);
    }
    {
      cuda::NvtxRange range("optimizer");
      (*opt)->step(3e-4f);
    }
    *loss = l->loss;
    return Status::ok();
  };
  int64_t step = 0;
  float loss = 0.0f;
  for (int i = 0; i < a.warmup; ++i) {
    if (Status s = one(step++, &loss); !s) return r.error = s.message(), r;
    if (i == 0) r.loss_first = loss;
  }
  (*be)->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) {
    if (Status s = one(step++, &loss); !s) return r.error = s.message(), r;
  }
  (*be)->synchronize();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.loss_last = loss;
  if (a.warmup == 0) r.loss_first = loss;
  if (Status s = (*be)->status(); !s) return r.error = s.message(), r;
  if (a.phases && cb != nullptr) {
    cb->op_timer().set_enabled(true);
    if (Status s = one(step++, &loss); !s) return r.error = s.message(), r;
    if (Status s = cb->op_timer().finish(); !s) return r.error = s.message(), r;
    r.phases = cb->op_timer().totals();
    cb->op_timer().set_enabled(false);
  }
  const auto& mem = (*be)->memory();
  const char* names[] = {"peak_weights", "peak_grads", "peak_optimizer", "peak_activations", "peak_workspace"};
  for (int i = 0; i < kNumMemCategories; ++i) r.extra.emplace_back(names[i], static_cast<int64_t>(mem.peak[static_cast<size_t>(i)]));
  r.extra.emplace_back("peak_total", static_cast<int64_t>(mem.peak_total));
  return r;
}

}  // namespace partrain::bench
