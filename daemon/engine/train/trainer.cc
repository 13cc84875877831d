// The training loop. Read it top to bottom: create() sets everything up, step() is one
// optimizer step, run() is the loop with logging.
#include "engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/trace.h"
#include "engine/model/hf_io.h"

namespace partrain::engine::train {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

std::string metrics_json(const StepMetrics& m) {
  // {} prints the shortest text that reads back to the same float: metrics are exact.
  std::string line = fmt::format(
      "{{\"step\":{},\"loss\":{},\"lr\":{},\"grad_norm\":{},\"tokens\":{},\"step_ms\":{:.3f},"
      "\"fwd_ms\":{:.3f},\"bwd_ms\":{:.3f},\"opt_ms\":{:.3f},\"data_ms\":{:.3f}",
      m.step, m.loss, m.lr, m.grad_norm, m.tokens, m.step_ms, m.fwd_ms, m.bwd_ms, m.opt_ms, m.data_ms);
  if (m.save_stall_ms > 0) {
    line += fmt::format(",\"save_stall_ms\":{:.3f},\"save_mb_s\":{:.1f}", m.save_stall_ms, m.save_mb_per_s);
  }
  line += fmt::format(",\"tokens_per_s\":{:.1f},\"tokens_per_s_per_rank\":{:.1f}", m.tokens_per_s,
                      m.tokens_per_s_per_rank);
  if (m.mfu > 0) line += fmt::format(",\"mfu\":{:.4f}", m.mfu);
  line += ",\"peak_mib\":{";
  for (int c = 0; c < kNumMemCategories; ++c) {
    line += fmt::format("{}\"{}\":{:.3f}", c > 0 ? "," : "", mem_category_name(static_cast<MemCategory>(c)),
                        static_cast<double>(m.peak_bytes[static_cast<size_t>(c)]) / (1 << 20));
  }
  line += "}";
  if (m.experts > 0) {
    // One array per MoE block, E counts each.
    line += ",\"expert_tokens\":[";
    const size_t E = static_cast<size_t>(m.experts);
    for (size_t b = 0; b * E < m.expert_tokens.size(); ++b) {
      line += b > 0 ? ",[" : "[";
      for (size_t e = 0; e < E; ++e) line += fmt::format("{}{}", e > 0 ? "," : "", m.expert_tokens[b * E + e]);
      line += "]";
    }
    line += "]";
    line += fmt::format(",\"dropped_tokens\":{},\"aux_loss\":{}", m.dropped_tokens, m.aux_loss);
  }
  if (m.ep > 1) line += fmt::format(",\"ep\":{}", m.ep);
  if (m.dp > 1 || m.tp > 1 || m.collectives > 0) {
    const double share = m.step_ms > 0 ? m.exposed_ms / m.step_ms : 0.0;
    line += fmt::format(",\"comm_ms\":{:.3f},\"exposed_ms\":{:.3f},\"exposed_share\":{:.4f},"
                        "\"collectives\":{},\"dp\":{}", m.comm_ms, m.exposed_ms, share,
                        m.collectives, m.dp);
    if (m.tp > 1) line += fmt::format(",\"tp\":{}", m.tp);
    for (int a = 0; a < kNumCommAxes; ++a) {
      const AxisComm& x = m.axes[static_cast<size_t>(a)];
      if (x.collectives == 0) continue;
      const char* name = comm_axis_name(static_cast<CommAxis>(a));
      line += fmt::format(",\"{}_comm_ms\":{:.3f},\"{}_exposed_ms\":{:.3f}", name, x.comm_ms, name,
                          x.exposed_ms);
    }
  }
  return line + "}";
}

Result<std::unique_ptr<Trainer>> Trainer::create(const RunOptions& options) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->o_ = options;
  const TrainOptions& tr = options.train;
  // Global batch = micro_batch x grad_accum x dp.
  const int per_pass = tr.micro_batch * options.dp;
  if (tr.micro_batch < 1 || options.dp < 1 || tr.global_batch < 1 ||
      tr.global_batch % per_pass != 0) {
    return Status::invalid(fmt::format(
        "[training] global_batch {} is not a multiple of micro_batch {} x dp {}; "
        "global_batch = micro_batch x grad_accum x dp", tr.global_batch, tr.micro_batch,
        options.dp));
  }
  t->accum_ = tr.global_batch / per_pass;
  // The data: memory-mapped shards and the seeded global order.
  Result<std::shared_ptr<data::TokenDataset>> ds =
      data::TokenDataset::open(options.data, options.model.vocab_size, options.model.seq_len);
  if (!ds) return ds.status();
  t->data_ = *ds;
  if (t->data_->num_windows() == 0) {
    return Status::invalid(fmt::format("[data] the shards hold {} tokens, fewer than one "
                                       "sequence of seq_len + 1 = {}", t->data_->num_tokens(),
                                       options.model.seq_len + 1));
  }
  t->sampler_ = std::make_unique<data::Sampler>(t->data_->num_windows(), tr.seed);
  // The device, the model (initialised from the seed, or loaded), the optimizer.
  Result<std::unique_ptr<Backend>> be = make_backend(options.device);
  if (!be) return be.status();
  t->backend_ = std::move(be).value();
  Result<std::unique_ptr<model::Model>> m =
      model::Model::create(options.model, t->backend_.get(), tr.micro_batch, tr.seed, options.shard,
                           options.tp, options.ep);
  if (!m) return m.status();
  t->model_ = std::move(m).value();
  if (!options.init_path.empty()) {
    PARTRAIN_RETURN_IF_ERROR(model::load_hf(*t->model_, options.init_path));
  }
  Result<std::unique_ptr<AdamW>> opt = AdamW::create(t->model_.get(), tr);
  if (!opt) return opt.status();
  t->opt_ = std::move(opt).value();
  const size_t n = static_cast<size_t>(tr.micro_batch) * options.model.seq_len;
  t->inputs_.resize(n);
  t->targets_.resize(n);
  return t;
}

void Trainer::set_progress(int64_t steps_done, int64_t tokens) {
  step_ = steps_done;
  tokens_ = tokens;
}

Trainer::~Trainer() {
  opt_.reset();  // frees its tensors while the backend is alive
  model_.reset();
}

Result<StepMetrics> Trainer::step() {
  const TrainOptions& tr = o_.train;
  const int T = o_.model.seq_len, mb = tr.micro_batch;
  StepMetrics m;
  const auto t_step = Clock::now();
  trace::begin_step(step_ + 1);
  // Gradients start at zero and accumulate over the micro-batches, each scaled by 1/m so
  // the result is the gradient of the mean loss over the global batch.
  if (hooks_ != nullptr) PARTRAIN_RETURN_IF_ERROR(hooks_->begin_step(step_));
  model_->zero_grads();
  model_->reset_moe_stats();
  double loss = 0.0, aux = 0.0;
  for (int k = 0; k < accum_; ++k) {
    // Global sample indices of this micro-batch: a function of (step, k, dp rank) only.
    // Micro-batch k of dp rank d reads step*G + (k*D + d)*mb ..: the union over the D
    // ranks is the single-rank batch, and each sample keeps its dropout stream.
    const uint64_t first = static_cast<uint64_t>(step_) * tr.global_batch +
                           (static_cast<uint64_t>(k) * o_.dp + o_.dp_rank) * mb;
    auto t0 = Clock::now();
    {
      trace::Span span("data", trace::Lane::kCompute, k);
      data::read_samples(*data_, *sampler_, first, mb, T, inputs_.data(), targets_.data());
    }
    m.data_ms += ms_since(t0);
    t0 = Clock::now();
    std::optional<trace::Span> span(std::in_place, "forward", trace::Lane::kCompute, k);
    Result<model::LossParts> parts =
        model_->forward({inputs_.data(), targets_.data(), mb, first, step_});
    if (!parts) return parts.status();
    backend_->synchronize();
    m.fwd_ms += ms_since(t0);
    span.emplace("backward", trace::Lane::kCompute, k);  // ends the forward span
    t0 = Clock::now();
    // On the last micro-batch each block's gradients are final when its backward ends:
    // the hooks may start syncing them under the rest of backward.
    Status hook_status;
    std::function<void(int)> block_done;
    if (hooks_ != nullptr && k == accum_ - 1) {
      block_done = [&](int l) {
        if (hook_status.is_ok()) hook_status = hooks_->block_grads_ready(*model_, l);
      };
    }
    model_->backward(1.0f / static_cast<float>(accum_), block_done);
    PARTRAIN_RETURN_IF_ERROR(hook_status);
    backend_->synchronize();
    m.bwd_ms += ms_since(t0);
    loss += parts->loss;
    aux += parts->aux;
  }
  loss /= accum_;
  // MoE: this rank's routing counts and mean aux loss (the hooks make them the batch's).
  if (o_.model.moe_experts > 0) {
    m.experts = o_.model.moe_experts;
    m.expert_tokens = model_->moe_stats().tokens;
    m.dropped_tokens = model_->moe_stats().dropped;
    m.aux_loss = aux / accum_;
  }
  m.ep = o_.ep.size;
  // Data parallel: every rank's gradient and loss become the global batch's.
  m.dp = o_.dp;
  m.tp = o_.tp.size;
  if (hooks_ != nullptr) {
    trace::Span span("wait for gradient sync");
    PARTRAIN_RETURN_IF_ERROR(hooks_->sync_grads(*model_, &m));
    PARTRAIN_RETURN_IF_ERROR(hooks_->reduce_loss(&loss));
  }
  // Clip by the global norm and take one AdamW step at this step's learning rate.
  const auto t_opt = Clock::now();
  m.lr = lr_at(tr, step_);
  OptimizerStepStats st;
  {
    trace::Span span("optimizer");
    st = opt_->step(m.lr);
    if (hooks_ != nullptr) PARTRAIN_RETURN_IF_ERROR(hooks_->after_step(*model_, &m));
    backend_->synchronize();
  }
  m.opt_ms = ms_since(t_opt);
  ++step_;
  tokens_ += static_cast<int64_t>(tr.global_batch) * T;
  m.step = step_;
  m.loss = loss;
  m.grad_norm = st.grad_norm;
  m.tokens = tokens_;
  m.step_ms = ms_since(t_step);
  // Throughput: the global batch's tokens over the step; MFU against every rank's peak.
  const int world = o_.world > 0 ? o_.world : o_.dp;
  const double step_tokens = static_cast<double>(tr.global_batch) * T;
  m.tokens_per_s = m.step_ms > 0 ? step_tokens / (m.step_ms / 1e3) : 0;
  m.tokens_per_s_per_rank = m.tokens_per_s / world;
  if (o_.model_flops_per_token > 0 && o_.peak_flops_per_rank > 0) {
    m.mfu = m.tokens_per_s * o_.model_flops_per_token / (o_.peak_flops_per_rank * world);
  }
  m.peak_bytes = backend_->memory().peak;
  if (!std::isfinite(m.loss)) {
    return Status::internal(fmt::format("step {}: loss is {}; lower [training] lr or raise "
                                        "warmup_steps", m.step, m.loss));
  }
  return m;
}

std::string step_summary(const StepMetrics& m) {
  std::string out;
  if (m.experts > 0) {
    out += fmt::format(" | aux {:.4g}, dropped {}, experts", m.aux_loss, m.dropped_tokens);
    const size_t E = static_cast<size_t>(m.experts);
    for (size_t i = 0; i < m.expert_tokens.size(); ++i) {
      out += fmt::format("{}{}", i % E == 0 ? (i == 0 ? " " : " / ") : ",", m.expert_tokens[i]);
    }
  }
  if (m.dp > 1 || m.tp > 1 || m.collectives > 0) {
    // "comm 12.0 ms, exposed dp 1.5 + tp 8.0 ms (40% of the step)"
    std::string exposed;
    for (int a = 0; a < kNumCommAxes; ++a) {
      const AxisComm& x = m.axes[static_cast<size_t>(a)];
      if (x.collectives == 0) continue;
      exposed += fmt::format("{}{} {:.1f}", exposed.empty() ? "" : " + ",
                             comm_axis_name(static_cast<CommAxis>(a)), x.exposed_ms);
    }
    if (exposed.empty()) exposed = fmt::format("{:.1f}", m.exposed_ms);
    out += fmt::format(" | comm {:.1f} ms, exposed {} ms ({:.0f}% of the step)", m.comm_ms, exposed,
                       m.step_ms > 0 ? 100 * m.exposed_ms / m.step_ms : 0.0);
  }
  if (m.save_stall_ms > 0) {
    out += fmt::format(" | checkpoint: {:.1f} ms stall, {:.1f} MB/s", m.save_stall_ms, m.save_mb_per_s);
  }
  return out;
}

void Trainer::print_step(const StepMetrics& m) const {
  if (o_.progress_bar) std::fputs("\r\033[K", stdout);  // erase the bar
  std::printf("step %5lld/%lld | loss %.6f | lr %.3e | norm %.4f | %8.0f tok/s | %7.1f ms",
              static_cast<long long>(m.step), static_cast<long long>(o_.train.steps), m.loss,
              static_cast<double>(m.lr), static_cast<double>(m.grad_norm), m.tokens_per_s, m.step_ms);
  if (m.mfu > 0) std::printf(" | MFU %.1f%%", 100 * m.mfu);
  std::fputs(step_summary(m).c_str(), stdout);
  std::fputc('\n', stdout);
  if (o_.progress_bar) {
    constexpr int kWidth = 30;
    const int done = static_cast<int>(kWidth * m.step / std::max<int64_t>(1, o_.train.steps));
    std::printf("[%s%s] %lld/%lld", std::string(static_cast<size_t>(done), '#').c_str(),
                std::string(static_cast<size_t>(kWidth - done), '.').c_str(),
                static_cast<long long>(m.step), static_cast<long long>(o_.train.steps));
  }
  std::fflush(stdout);
}

Status open_metrics(const std::string& path, int64_t resumed_at, std::ofstream* out) {
  std::vector<std::string> kept;
  if (resumed_at > 0) {
    std::ifstream in(path);
    std::string line;
    const std::string key = "{\"step\":";
    while (std::getline(in, line)) {
      if (line.rfind(key, 0) != 0) continue;
      if (std::atoll(line.c_str() + key.size()) <= resumed_at) kept.push_back(line);
    }
  }
  out->open(path, std::ios::trunc);
  if (!*out) return Status::io_error(path + ": cannot open for writing");
  for (const std::string& l : kept) *out << l << '\n';
  out->flush();
  return Status::ok();
}

Status Trainer::run() {
  const TrainOptions& tr = o_.train;
  std::ofstream metrics;
  if (!o_.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o_.run_dir, ec);
    if (ec) return Status::io_error(o_.run_dir + ": cannot create the run folder: " + ec.message());
    PARTRAIN_RETURN_IF_ERROR(open_metrics(o_.run_dir + "/metrics.jsonl", step_, &metrics));
  }
  log::info("engine", "{}: {} parameters, {} on {}, global batch {} = {} x {} micro-batches "
            "x dp {}, {} tokens in {} sequences", o_.name, model_->num_params(),
            o_.model.arch == Arch::kGpt2 ? "gpt2" : "llama", backend_->name(), tr.global_batch,
            tr.micro_batch, accum_, o_.dp, data_->num_tokens(), data_->num_windows());
  for (int64_t s = step_; s < tr.steps; ++s) {
    log::set_step(s + 1);
    Result<StepMetrics> m = step();
    if (!m) return m.status();
    const bool stop = (hooks_ != nullptr && hooks_->stop_requested()) ||
                      (o_.stop != nullptr && o_.stop->load());
    const bool final = stop || m->step == tr.steps;
    if (save_hook_ != nullptr) PARTRAIN_RETURN_IF_ERROR(save_hook_->after_step(*this, final, &*m));
    trace::end_step(m->step);  // after the save, so a traced step shows its checkpoint I/O
    if (metrics.is_open()) metrics << metrics_json(*m) << '\n' << std::flush;
    if (!o_.quiet && (m->step % std::max(1, tr.log_every) == 0 || m->step == tr.steps)) print_step(*m);
    if (stop && m->step < tr.steps) {
      return Status::unavailable(fmt::format("stopped at step {} (SIGTERM/SIGINT)", m->step));
    }
  }
  if (o_.progress_bar && !o_.quiet) std::fputs("\n", stdout);
  if (Status s = trace::flush(); !s) log::warn("engine", "{}", s.message());
  // Peak device memory per category, for comparison with the planner's estimate.
  const MemoryStats& mem = backend_->memory();
  std::string peaks;
  for (int c = 0; c < kNumMemCategories; ++c) {
    peaks += fmt::format("{} {:.2f} MiB, ", mem_category_name(static_cast<MemCategory>(c)),
                         static_cast<double>(mem.peak[static_cast<size_t>(c)]) / (1 << 20));
  }
  log::info("engine", "peak memory: {}total {:.2f} MiB", peaks,
            static_cast<double>(mem.peak_total) / (1 << 20));
  if (!o_.save_path.empty()) {
    PARTRAIN_RETURN_IF_ERROR(model::save_hf(*model_, o_.save_path));
    log::info("engine", "weights written to {} (Hugging Face names)", o_.save_path);
  }
  return Status::ok();
}

}  // namespace partrain::engine::train
