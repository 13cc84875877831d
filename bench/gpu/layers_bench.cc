// The layers mode of the GPU benchmark: KernelGpt2 (layers_step.h) with the run's paths,
// warm-up, an optional CUDA graph, the timed steps, an optional phase-timed step.
#include <chrono>
#include <string>
#include <vector>

#include "bench_common.h"
#include "layers_step.h"

namespace partrain::bench {

BenchResult run_layers(const BenchArgs& a, const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt) {
  BenchResult r;
  Gpt2Shape shape;
  shape.seq = a.seq;
  r.layers = shape.layers;
  r.channels = shape.channels;
  LayerStepOptions o;
  if (Status s = engine::cuda::parse_kernel_paths(a.paths.c_str(), &o.paths); !s) {
    r.error = s.message();
    return r;
  }
  o.attention = a.attention;
  o.overwrite = a.overwrite;
  o.device_optimizer = a.device_optimizer;
  auto g = KernelGpt2::create(shape, a.batch, 1337, o);
  if (!g) {
    r.error = g.status().message();
    return r;
  }
  KernelGpt2& m = **g;
  r.flops_params = m.num_params_no_pos();
  r.attention_used = m.attention_used();
  auto fail = [&](const Status& s) {
    r.error = s.message();
    return r;
  };
  if (Status s = m.set_batch(tok, tgt); !s) return fail(s);
  for (int i = 0; i < a.warmup; ++i) {
    if (Status s = m.step(); !s) return fail(s);
    if (i == 0) {
      auto l = m.last_loss();
      if (!l) return fail(l.status());
      r.loss_first = *l;
    }
  }
  if (a.graph) {
    const Status s = m.capture_graph();
    if (!s) r.graph_error = s.message();
    r.graph = m.graph_captured();
  }
  if (Status s = m.synchronize(); !s) return fail(s);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.steps; ++i) {
    if (Status s = m.step(); !s) return fail(s);
  }
  if (Status s = m.synchronize(); !s) return fail(s);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto l = m.last_loss();
  if (!l) return fail(l.status());
  r.loss_last = *l;
  if (a.warmup == 0) r.loss_first = r.loss_last;
  if (a.phases && !m.graph_captured()) {
    m.phases().set_enabled(true);
    if (Status s = m.step(); !s) return fail(s);
    if (Status s = m.phases().finish(); !s) return fail(s);
    r.phases = m.phases().totals();
  }
  return r;
}

}  // namespace partrain::bench
