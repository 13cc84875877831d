// See pipeline_parallel.h. plan_pipeline() is what every rank decides alone; the
// PipelineRunner below is one rank's training loop: setup, then per step the schedule's
// actions, the gradient sync, the optimizer and the step's numbers.
#include "worker/pipeline_parallel.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/trace.h"
#include "engine/backend.h"
#include "engine/data/dataset.h"
#include "engine/model/model.h"
#include "engine/train/optimizer.h"
#include "engine/train/trainer.h"
#include "pipeline/check.h"
#include "planner/run_accounting.h"
#include "store/saver.h"
#include "plugin/schedule_loader.h"
#include "worker/data_plugin.h"
#include "worker/expert_plugin.h"
#include "worker/pipeline_sums.h"
#include "worker/tensor_plugin.h"

namespace partrain::worker {

namespace engine = partrain::engine;
using pipeline::Action;
using pipeline::Kind;

Result<PipelinePlan> plan_pipeline(const config::JobConfig& job, const Layout& layout,
                                   const std::string& plugin_dir) {
  const ParallelSpec& spec = job.parallelism;
  const std::string what = "--partrain=" + spec.to_string();
  if (spec.zero > 0) {
    return Status::invalid(fmt::format("{}: zero{} combined with pp is not run by this partrain yet; "
                                       "use plain dp (zero0) with pp", what, spec.zero));
  }
  Result<int> m = config::grad_accum_steps(job, layout.dp());
  if (!m) return m.status();
  Result<std::unique_ptr<plugin::SchedulePlugin>> plug = plugin::find_schedule_plugin(plugin_dir, spec.sched);
  if (!plug) return Status::invalid(plug.status().message());
  Result<pipeline::Schedule> sched = (*plug)->build(layout.pp(), *m, spec.virtual_stages);
  if (!sched) return Status::invalid(sched.status().message());
  PARTRAIN_RETURN_IF_ERROR(pipeline::check(*sched));
  bool split = false;
  for (const std::vector<Action>& list : sched->ranks) {
    for (const Action& a : list) split = split || a.kind == Kind::kBackwardInput;
  }
  if (split && (job.model.recompute != engine::Recompute::kNone || job.model.moe_experts > 0 ||
                layout.tp() > 1)) {
    return Status::invalid(fmt::format(
        "{}: schedule {} splits backward into input and weight gradients (ZB-H1), which keeps "
        "every block's activations until the weight gradient and is not implemented for "
        "mixture-of-experts blocks or with tp; set [model] recompute = \"none\" (dense models, "
        "tp1) or use sched=1f1b", what, sched->name));
  }
  Result<std::vector<pipeline::PieceCost>> pieces = pipeline::piece_costs(engine::model::resolved(job.model));
  if (!pieces) return pieces.status();
  Result<std::vector<pipeline::StagePart>> parts =
      pipeline::partition_stages(*pieces, layout.pp() * spec.virtual_stages);
  if (!parts) return parts.status();
  PipelinePlan plan;
  plan.schedule = std::move(sched).value();
  plan.parts = std::move(parts).value();
  plan.source = fmt::format("{} {} from {}", (*plug)->info().name, (*plug)->info().version, (*plug)->info().path);
  return plan;
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Gloo tags of the two streams between a pair of ranks, and of the tied-embedding sum.
constexpr uint32_t kTagActivation = 1;
constexpr uint32_t kTagGrad = 2;
constexpr uint32_t kTagTied = 3;

// One chunk of this rank: a stage model, its optimizer, and its transfer buffers.
struct Chunk {
  int stage = 0;
  pipeline::StagePart part;
  std::unique_ptr<engine::model::Model> model;
  std::unique_ptr<engine::train::AdamW> opt;
  std::vector<engine::Tensor> grad_in;   // per slot: the received gradient of the output
  std::vector<engine::Tensor> grad_out;  // per micro-batch: the input gradient being sent
  std::vector<int> slot_of;              // per micro-batch: its activation slot, or -1
  std::vector<int> free_slots;
  std::vector<comm::WorkHandle> recv_act, recv_grad;  // per micro-batch, pending receives
  int64_t offset = 0;                    // where its gradients start in the plugin's view
  int backwards = 0;                     // backwards done this step
  bool tied_head = false;                // holds GPT-2's head copy of wte (not the first stage)
};

// The most micro-batches of one chunk whose activations are held at once in the rank's
// action order: from the first of its recv-activation and forward to its backward (or
// backward-weight).
int slots_needed(const std::vector<Action>& list, int chunk, int m) {
  std::vector<bool> held(static_cast<size_t>(m), false);
  int now = 0, peak = 0;
  for (const Action& a : list) {
    if (a.chunk != chunk) continue;
    if ((a.kind == Kind::kRecvActivation || a.kind == Kind::kForward) && !held[static_cast<size_t>(a.mb)]) {
      held[static_cast<size_t>(a.mb)] = true;
      peak = std::max(peak, ++now);
    } else if (a.kind == Kind::kBackward || a.kind == Kind::kBackwardWeight) {
      --now;  // a backward-input keeps the activations for its backward-weight
    }
  }
  return std::max(peak, 1);
}

class PipelineRunner {
 public:
  explicit PipelineRunner(const PipelineRun& pipe)
      : run_(*pipe.run), pipe_(pipe), job_(*run_.job), sched_(pipe.plan->schedule), shape_(sched_.shape),
        actions_(sched_.ranks[static_cast<size_t>(pipe.pp_rank)]) {
    for (const Action& a : actions_) transfers_ += pipeline::is_compute(a.kind) ? 0 : 1;
  }
  ~PipelineRunner() {
    for (Chunk& c : chunks_) {
      for (engine::Tensor& t : c.grad_in) be_->release(&t);
      for (engine::Tensor& t : c.grad_out) be_->release(&t);
      c.opt.reset();
      c.model.reset();
    }
    plugin_.reset();
  }

  Status setup();
  Status resume();
  Status run();
  const engine::MemoryStats& memory() const { return be_->memory(); }

 private:
  Result<engine::train::StepMetrics> step();
  Status run_actions(engine::train::StepMetrics* m, double* loss);
  Status forward(Chunk& c, const Action& a, engine::train::StepMetrics* m, double* loss);
  Status backward(Chunk& c, const Action& a, engine::train::StepMetrics* m);
  Status hand_over(Chunk& c);
  Status sum_tied_embeddings();
  Status reduce_loss_and_stop(double* loss);
  std::vector<store::PieceView> save_views(Chunk& c);
  Result<float> global_norm();
  int slot(Chunk& c, int mb);
  void post_receives(size_t count);
  Status wait_recv(comm::WorkHandle& h, const Action& a);
  void print_step(const engine::train::StepMetrics& m, double bubble) const;
  Chunk& chunk(const Action& a) { return chunks_[static_cast<size_t>(a.chunk)]; }
  // The token embedding, which a tied head shares.
  const char* tied_name() const {
    return job_.model.arch == engine::Arch::kGpt2 ? "wte.weight" : "model.embed_tokens.weight";
  }
  int64_t tokens_per_micro_batch() const { return static_cast<int64_t>(mb_) * job_.model.seq_len; }

  const DataParallelRun& run_;
  const PipelineRun& pipe_;
  const config::JobConfig& job_;
  const pipeline::Schedule& sched_;
  const pipeline::Shape shape_;
  const std::vector<Action>& actions_;
  int mb_ = 0;  // sequences per micro-batch
  std::unique_ptr<engine::Backend> be_;
  std::shared_ptr<engine::data::TokenDataset> data_;
  std::unique_ptr<engine::data::Sampler> sampler_;
  std::vector<Chunk> chunks_;
  std::unique_ptr<DataPlugin> plugin_;
  std::unique_ptr<TensorPluginComm> tensor_;  // tp > 1
  std::unique_ptr<ExpertPluginComm> expert_;  // ep > 1: every chunk's MoE blocks on the ep group
  std::unique_ptr<store::CheckpointSaver> saver_;  // null without a committer
  std::vector<int32_t> inputs_, targets_;
  std::vector<comm::WorkHandle> sends_;  // this step's, waited for at its end
  std::vector<size_t> recvs_;            // the positions of the list's receives, in order
  size_t next_recv_ = 0;                 // the first of them not posted yet this step
  double flops_per_token_ = 0, peak_flops_ = 0;
  int64_t step_ = 0, tokens_ = 0;
  double aux_ = 0;  // this step's MoE aux losses of this rank's forwards
  bool stop_ = false;
  // This step's timeline: first action start, last action end, busy time (wall-clock us),
  // and the point-to-point time (first posted to last done) and the waits for it.
  int64_t t_begin_ = 0, t_end_ = 0, busy_us_ = 0;
  Clock::time_point p2p_first_{}, p2p_last_{};
  bool p2p_any_ = false;
  int transfers_ = 0;  // this rank's sends and receives per step (its action list's)
  double exposed_ms_ = 0, bubble_ = 0;
};

Status PipelineRunner::setup() {
  Result<int> mb = config::micro_batch_size(job_, run_.dp);
  if (!mb) return mb.status();
  mb_ = *mb;
  Result<std::unique_ptr<engine::Backend>> be = engine::make_backend("cpu");
  if (!be) return be.status();
  be_ = std::move(be).value();
  Result<std::shared_ptr<engine::data::TokenDataset>> ds =
      engine::data::TokenDataset::open(job_.data, job_.model.vocab_size, job_.model.seq_len);
  if (!ds) return ds.status();
  data_ = *ds;
  if (data_->num_windows() == 0) {
    return Status::invalid(fmt::format("[data] the shards hold {} tokens, fewer than one sequence "
                                       "of seq_len + 1", data_->num_tokens()));
  }
  sampler_ = std::make_unique<engine::data::Sampler>(data_->num_windows(), job_.training.seed);
  const char* hardware = std::getenv("PARTRAIN_HARDWARE");
  Result<planner::RunAccounting> acct = planner::run_accounting(job_.model, "cpu", hardware ? hardware : "");
  if (!acct) return acct.status();
  flops_per_token_ = acct->model_flops_per_token;
  peak_flops_ = acct->peak_flops_per_rank;

  // Tensor parallel inside the stages: the tp plugin on the tp group.
  const engine::model::TensorOptions tp{run_.tp_rank, run_.tp, run_.tp > 1 && run_.sp};
  if (run_.tp > 1) {
    tensor_ = std::make_unique<TensorPluginComm>(run_.tensor_plugin, run_.tp_comm);
    PARTRAIN_RETURN_IF_ERROR(tensor_->init(run_.tensor_config, tp.sp, run_.rank, run_.world));
  }
  // Expert parallel inside the stages: the ep plugin on the ep (and expert-dp) group, one
  // instance for all chunks (their MoE blocks run in the action list's order, the same on
  // every rank of the ep group, which shares this rank's stage).
  const engine::model::ExpertOptions ep{run_.ep_rank, run_.ep};
  if (run_.ep > 1) {
    expert_ = std::make_unique<ExpertPluginComm>(run_.expert_plugin, run_.ep_comm, run_.expert_dp_comm);
    PARTRAIN_RETURN_IF_ERROR(expert_->init(run_.expert_config, job_.model.moe_experts, run_.rank, run_.world));
  }
  // One stage model per chunk, with a slot per micro-batch it holds at once.
  const int64_t N = tokens_per_micro_batch();
  int64_t offset = 0;
  size_t replicated = 0;  // what the data plugin averages: all but the experts under ep
  chunks_.resize(static_cast<size_t>(shape_.v));
  for (int c = 0; c < shape_.v; ++c) {
    Chunk& ch = chunks_[static_cast<size_t>(c)];
    ch.stage = shape_.stage(pipe_.pp_rank, c);
    ch.part = pipe_.plan->parts[static_cast<size_t>(ch.stage)];
    const int slots = slots_needed(actions_, c, shape_.m);
    bool split = false;
    for (const Action& a : actions_) split = split || (a.chunk == c && a.kind == Kind::kBackwardInput);
    auto model = engine::model::Model::create(job_.model, be_.get(), mb_, job_.training.seed, {}, tp, ep,
                                              {ch.part.first_block, ch.part.end_block, slots, split});
    if (!model) return model.status();
    ch.model = std::move(model).value();
    if (tensor_) ch.model->set_tensor_comm(tensor_.get());
    if (expert_) ch.model->set_expert_comm(expert_.get());
    // What crosses a stage boundary: the residual stream's rows this rank holds.
    const engine::Shape rows = ch.model->stage_input(0).shape;
    auto opt = engine::train::AdamW::create(ch.model.get(), job_.training);
    if (!opt) return opt.status();
    ch.opt = std::move(opt).value();
    ch.tied_head = ch.model->last_stage() && !ch.model->first_stage() && ch.model->options().tie_embeddings;
    auto buffers = [&](std::vector<engine::Tensor>* out, int count) -> Status {
      for (int i = 0; i < count; ++i) {
        Result<engine::Tensor> t = be_->alloc(engine::MemCategory::kWorkspace, engine::DType::kF32, rows);
        if (!t) return t.status();
        out->push_back(*t);
      }
      return Status::ok();
    };
    if (!ch.model->last_stage()) PARTRAIN_RETURN_IF_ERROR(buffers(&ch.grad_in, slots));
    if (!ch.model->first_stage()) PARTRAIN_RETURN_IF_ERROR(buffers(&ch.grad_out, shape_.m));
    ch.offset = offset;
    offset += ch.model->num_params();
    replicated += replicated_numel(ch.model->table(), run_.ep);
    ch.recv_act.resize(static_cast<size_t>(shape_.m));
    ch.recv_grad.resize(static_cast<size_t>(shape_.m));
    if (run_.rank == 0 || run_.dp_rank == 0) {
      log::info("worker", "pp rank {}: stage {} = blocks {}-{}{}{}, {} parameters, {} activation slots",
                pipe_.pp_rank, ch.stage, ch.part.first_block, ch.part.end_block - 1,
                ch.part.embedding ? " + embeddings" : "", ch.part.head ? " + head" : "",
                ch.model->num_params(), slots);
    }
  }
  // The data plugin over this rank's stage group: every chunk's gradients, one after the
  // other in its view (buckets never span two chunks: their buffers differ).
  if (run_.plugin_v1 != nullptr || run_.plugin_v2 != nullptr) {
    if (run_.plugin_v1 != nullptr && shape_.v > 1) {
      return Status::invalid("the data plugin speaks only ABI v1, which needs one gradient buffer; "
                             "interleaved pipelines need a v2 data plugin (dp)");
    }
    plugin_ = std::make_unique<DataPlugin>(run_.plugin_v1, run_.plugin_v2);
    PARTRAIN_RETURN_IF_ERROR(plugin_->init(run_.plugin_config, run_.dp_comm, run_.rank,
                                           replicated, 0));
    if (plugin_->plan().stage != 0) {
      return Status::invalid("the data plugin shards training state (ZeRO); pipeline stages run "
                             "with plain dp in this version");
    }
  }
  inputs_.resize(static_cast<size_t>(N));
  targets_.resize(static_cast<size_t>(N));
  for (size_t i = 0; i < actions_.size(); ++i) {
    if (pipeline::is_recv(actions_[i].kind)) recvs_.push_back(i);
  }
  if (run_.committer != nullptr) {
    saver_ = std::make_unique<store::CheckpointSaver>(saver_options(run_), run_.committer);
  }
  return Status::ok();
}

// Every chunk reads its tensors (weights and moments, by logical name) back from the
// checkpoint's pieces, whatever layout wrote them; the step fixes data, dropout and lr.
Status PipelineRunner::resume() {
  const store::Checkpoint& c = *run_.resume;
  for (Chunk& ch : chunks_) {
    PARTRAIN_RETURN_IF_ERROR(store::restore_views(
        *be_, run_.ckpt_root, c, store::model_views(*ch.model, *ch.opt, 0, ch.model->num_params(), true)));
    ch.opt->reload_master();
    ch.opt->set_steps_taken(c.state.adam_steps);
  }
  step_ = c.state.step;
  tokens_ = c.state.tokens;
  if (run_.rank == 0) {
    log::info("worker", "resuming at step {} from {}/{} (written by {})", c.state.step, run_.ckpt_root,
              store::step_folder(c.state.step), c.state.layout.empty() ? "one rank" : c.state.layout);
    if (std::string why = store::nothing_left(c, job_.training.steps, run_.ckpt_root); !why.empty()) {
      log::warn("worker", "{}", why);
    }
  }
  return Status::ok();
}

// What chunk `c` writes at a save, so the pieces of all ranks cover every tensor once:
// dp rank d the d-th 1/dp of its flat buffers as logical pieces (under tp, tensors every tp
// rank holds whole from tp rank 0 only); a tied head's copy of wte is left to the first
// stage. Under ep the ranks of an ep group hold different experts: dp rank d writes the
// d-th 1/dp of each replicated tensor, expert-dp rank e the e-th 1/expert_dp of each of its
// experts (store::ExpertParallelLayout's split).
std::vector<store::PieceView> PipelineRunner::save_views(Chunk& c) {
  const int64_t n = c.model->num_params();
  std::vector<store::PieceView> out;
  if (!expert_) {
    for (store::PieceView& v : store::model_views(*c.model, *c.opt, n * run_.dp_rank / run_.dp,
                                                  n * (run_.dp_rank + 1) / run_.dp, run_.tp_rank == 0)) {
      if (!(c.tied_head && v.spec.tensor == tied_name())) out.push_back(std::move(v));
    }
    return out;
  }
  const engine::model::ParamTable& table = c.model->table();
  for (store::PieceView& v : store::model_views(*c.model, *c.opt, 0, n, true)) {  // whole tensors
    if (c.tied_head && v.spec.tensor == tied_name()) continue;
    const bool expert = table.specs()[static_cast<size_t>(table.find(v.spec.tensor))].expert;
    const int64_t parts = expert ? run_.expert_dp : run_.dp, k = expert ? run_.expert_dp_rank : run_.dp_rank;
    const int64_t len = v.spec.end - v.spec.begin;
    const int64_t lo = len * k / parts, hi = len * (k + 1) / parts;
    if (hi == lo) continue;
    v.tensor = v.tensor.slice(lo, engine::Shape{hi - lo});
    v.spec.end = v.spec.begin + hi;
    v.spec.begin += lo;
    out.push_back(std::move(v));
  }
  return out;
}

int PipelineRunner::slot(Chunk& c, int mb) {
  int& s = c.slot_of[static_cast<size_t>(mb)];
  if (s < 0) {
    s = c.free_slots.back();
    c.free_slots.pop_back();
  }
  return s;
}

Status PipelineRunner::wait_recv(comm::WorkHandle& h, const Action& a) {
  if (!h) return Status::internal("pipeline: " + pipeline::describe(a) + " with no receive posted");
  const int64_t t0 = trace::active() ? trace::now_us() : -1;
  const auto w0 = Clock::now();
  Status s = h->wait();
  exposed_ms_ += ms_since(w0);
  p2p_last_ = Clock::now();
  if (t0 >= 0) trace::record("wait", trace::Lane::kComm, t0, trace::now_us(), "pp", a.mb);
  h.reset();
  return s;
}

Status PipelineRunner::forward(Chunk& c, const Action& a, engine::train::StepMetrics* m, double* loss) {
  const int s = slot(c, a.mb);
  // Micro-batch k of dp rank d reads global samples step*G + (k*D + d)*b .. (the trainer's
  // slicing): every stage reads it (the first its tokens, the last its targets, all the
  // sample index that keys dropout).
  const uint64_t first = static_cast<uint64_t>(step_) * job_.training.global_batch +
                         (static_cast<uint64_t>(a.mb) * run_.dp + run_.dp_rank) * mb_;
  const auto t0 = Clock::now();
  engine::data::read_samples(*data_, *sampler_, first, mb_, job_.model.seq_len, inputs_.data(), targets_.data());
  m->data_ms += ms_since(t0);
  Result<engine::model::LossParts> parts =
      c.model->forward({inputs_.data(), targets_.data(), mb_, first, step_}, s);
  if (!parts) return parts.status();
  *loss += parts->loss;  // the last stage's cross-entropy and every stage's aux loss
  aux_ += parts->aux;
  return Status::ok();
}

Status PipelineRunner::backward(Chunk& c, const Action& a, engine::train::StepMetrics* /*m*/) {
  const int s = slot(c, a.mb);
  const engine::Tensor dout = c.model->last_stage() ? engine::Tensor{} : c.grad_in[static_cast<size_t>(s)];
  if (a.kind == Kind::kBackwardWeight) {
    c.model->backward_weight(s);
  } else {
    c.model->backward(s, 1.0f / static_cast<float>(shape_.m), dout,
                      a.kind == Kind::kBackwardInput ? engine::model::BackwardPart::kInput
                                                     : engine::model::BackwardPart::kAll);
    if (!c.model->first_stage()) be_->copy(c.grad_out[static_cast<size_t>(a.mb)], c.model->input_grad());
    if (a.kind == Kind::kBackwardInput) return Status::ok();  // the slot stays for the weight half
  }
  c.slot_of[static_cast<size_t>(a.mb)] = -1;
  c.free_slots.push_back(s);
  if (++c.backwards == shape_.m) PARTRAIN_RETURN_IF_ERROR(hand_over(c));
  return Status::ok();
}

// The chunk's gradients are final: the plugin's buckets reduce them while the rest of the
// schedule runs. Back to front, as the data-parallel loop hands blocks over.
Status PipelineRunner::hand_over(Chunk& c) {
  if (!plugin_) return Status::ok();
  const auto& specs = c.model->table().specs();
  float* grads = c.model->grads().ptr<float>();
  for (size_t i = specs.size(); i-- > 0;) {
    if (specs[i].expert && expert_) continue;  // summed over expert-dp apart (step())
    PARTRAIN_RETURN_IF_ERROR(plugin_->grads_ready(grads + specs[i].offset,
                                                  static_cast<size_t>(c.offset + specs[i].offset),
                                                  static_cast<size_t>(specs[i].numel()), nullptr));
  }
  return Status::ok();
}

// Posts the receives of the rank's list in order, from the first not yet posted, while the
// next one has its buffer: a free activation slot (or the one its micro-batch holds) for
// activations, the micro-batch's slot (taken by its forward) for gradients. The one at the
// list's current action always has its buffer (the slot count came from the list's own
// order), so by the time an action runs its receive is posted.
void PipelineRunner::post_receives(size_t count) {
  comm::Communicator& pp = *pipe_.pp_comm;
  for (; next_recv_ < recvs_.size(); ++next_recv_) {
    const Action& a = actions_[recvs_[next_recv_]];
    Chunk& c = chunk(a);
    const size_t mb = static_cast<size_t>(a.mb);
    if (a.kind == Kind::kRecvActivation) {
      if (c.slot_of[mb] < 0 && c.free_slots.empty()) return;
      c.recv_act[mb] = pp.recv(c.model->stage_input(slot(c, a.mb)).ptr<float>(), count, a.peer, kTagActivation);
    } else {
      if (c.slot_of[mb] < 0) return;
      c.recv_grad[mb] = pp.recv(c.grad_in[static_cast<size_t>(c.slot_of[mb])].ptr<float>(), count, a.peer, kTagGrad);
    }
    if (!p2p_any_) p2p_first_ = Clock::now(), p2p_any_ = true;
  }
}

Status PipelineRunner::run_actions(engine::train::StepMetrics* m, double* loss) {
  const size_t count = static_cast<size_t>(chunks_[0].model->stage_input(0).numel());
  for (Chunk& c : chunks_) {
    c.slot_of.assign(static_cast<size_t>(shape_.m), -1);
    c.free_slots.clear();
    for (int s = c.model->stage().slots; s-- > 0;) c.free_slots.push_back(s);
    c.backwards = 0;
    c.model->zero_grads();
    c.model->reset_moe_stats();
  }
  aux_ = 0;
  p2p_any_ = false;
  exposed_ms_ = 0;
  busy_us_ = 0;
  next_recv_ = 0;
  t_begin_ = trace::now_us();
  for (const Action& a : actions_) {
    Chunk& c = chunk(a);
    // Receives are posted ahead, in the list's order, as soon as their buffers are free:
    // Gloo moves a payload only once its receive is posted, so this lets it arrive under
    // the compute before the action that needs it.
    post_receives(count);
    // A compute action first waits for the receive it needs (exposed time, not busy).
    if (a.kind == Kind::kForward && !c.model->first_stage()) {
      PARTRAIN_RETURN_IF_ERROR(wait_recv(c.recv_act[static_cast<size_t>(a.mb)], a));
    }
    if ((a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput) && !c.model->last_stage()) {
      PARTRAIN_RETURN_IF_ERROR(wait_recv(c.recv_grad[static_cast<size_t>(a.mb)], a));
    }
    const int64_t start = trace::now_us();
    const bool compute = pipeline::is_compute(a.kind);
    if (!compute && !p2p_any_) p2p_first_ = Clock::now(), p2p_any_ = true;
    comm::Communicator& pp = *pipe_.pp_comm;
    switch (a.kind) {
      case Kind::kForward: {
        const auto t0 = Clock::now();
        PARTRAIN_RETURN_IF_ERROR(forward(c, a, m, loss));
        m->fwd_ms += ms_since(t0);
        break;
      }
      case Kind::kBackward:
      case Kind::kBackwardInput:
      case Kind::kBackwardWeight: {
        const auto t0 = Clock::now();
        PARTRAIN_RETURN_IF_ERROR(backward(c, a, m));
        m->bwd_ms += ms_since(t0);
        break;
      }
      case Kind::kRecvActivation:
      case Kind::kRecvGrad:
        break;  // posted by post_receives (at the latest just now)
      case Kind::kSendActivation:
        sends_.push_back(pp.send(c.model->stage_output(slot(c, a.mb)).ptr<float>(), count, a.peer, kTagActivation));
        break;
      case Kind::kSendGrad:
        sends_.push_back(pp.send(c.grad_out[static_cast<size_t>(a.mb)].ptr<float>(), count, a.peer, kTagGrad));
        break;
      default:
        return Status::internal("pipeline: " + pipeline::describe(a) + " is not run by this runtime");
    }
    const int64_t end = trace::now_us();
    if (compute) {
      busy_us_ += end - start;
      if (trace::active()) {
        trace::record(pipeline::short_label(a, shape_.v), trace::Lane::kCompute, start, end, {}, a.mb);
      }
    }
    t_end_ = end;
  }
  // Every send's buffer was kept until here.
  const auto w0 = Clock::now();
  for (comm::WorkHandle& h : sends_) PARTRAIN_RETURN_IF_ERROR(h->wait());
  sends_.clear();
  if (p2p_any_) {
    exposed_ms_ += ms_since(w0);
    p2p_last_ = std::max(p2p_last_, Clock::now());
  }
  return Status::ok();
}

// GPT-2's head is wte: the first stage's copy has the embedding's gradient, the last
// stage's the head's; each adds the other's, so both hold the sum (a + b = b + a exactly).
Status PipelineRunner::sum_tied_embeddings() {
  if (!job_.model.tie_embeddings) return Status::ok();
  for (Chunk& c : chunks_) {
    const bool emb = c.model->first_stage() && !c.model->last_stage();
    if (!emb && !c.tied_head) continue;
    const int i = c.model->table().find(tied_name());
    const engine::Tensor g = c.model->grad(i);
    Result<engine::Tensor> other = be_->alloc(engine::MemCategory::kWorkspace, engine::DType::kF32, g.shape);
    if (!other) return other.status();
    const int peer = emb ? shape_.rank_of(shape_.stages() - 1) : shape_.rank_of(0);
    Status s = pipe_.pp_comm
                   ->batch_send_recv({{true, g.ptr<float>(), static_cast<size_t>(g.numel()), peer, kTagTied},
                                      {false, other->ptr<float>(), static_cast<size_t>(g.numel()), peer, kTagTied}})
                   ->wait();
    if (s) be_->accumulate(g, *other);
    be_->release(&*other);
    PARTRAIN_RETURN_IF_ERROR(s);
  }
  return Status::ok();
}

// The clipping norm over every stage: this rank's sum of squares (the head's copy of wte
// left out: the first stage counts it), summed over pp. The dp ranks of a stage hold the
// same (averaged) gradients; under ep each holds its experts only, whose squares are summed
// over the ep group first (the ranks of an expert-dp group hold the same experts).
Result<float> PipelineRunner::global_norm() {
  double local = 0, experts = 0;
  for (Chunk& c : chunks_) {
    const auto& specs = c.model->table().specs();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (c.tied_head && specs[i].name == tied_name()) continue;
      // Under tp a split tensor's piece counts on its rank, a replicated one on tp rank 0.
      if (run_.tp > 1 && !specs[i].split() && run_.tp_rank != 0) continue;
      (specs[i].expert && expert_ ? experts : local) += be_->sum_squares(c.model->grad(static_cast<int>(i)));
    }
  }
  if (expert_) {
    local += expert_->sum(experts);
    PARTRAIN_RETURN_IF_ERROR(expert_->status());
  }
  if (tensor_) local = tensor_->sum(local);
  const Split2 p = split(local);
  float parts[2] = {p.head, p.rest};
  PARTRAIN_RETURN_IF_ERROR(pipe_.pp_comm->all_reduce(parts, 2, comm::ReduceOp::kSum)->wait());
  return static_cast<float>(std::sqrt(join(parts[0], parts[1])));
}

// The step's loss and the stop flag: summed over pp (the last stage has the cross-entropy,
// every stage its aux losses), then averaged over dp; stop if any rank was asked to.
Status PipelineRunner::reduce_loss_and_stop(double* loss) {
  const Split2 l = split(*loss);
  float shared[3] = {l.head, l.rest, run_.stop->load() ? 1.0f : 0.0f};
  if (run_.tp_comm != nullptr) {  // a tp group agrees on stopping first (its ranks' losses agree)
    PARTRAIN_RETURN_IF_ERROR(run_.tp_comm->all_reduce(shared + 2, 1, comm::ReduceOp::kMax)->wait());
  }
  PARTRAIN_RETURN_IF_ERROR(pipe_.pp_comm->all_reduce(shared, 3, comm::ReduceOp::kSum)->wait());
  *loss = join(shared[0], shared[1]);
  stop_ = shared[2] > 0;
  if (run_.dp_comm == nullptr) return Status::ok();
  float across[2] = {static_cast<float>(*loss), shared[2]};
  PARTRAIN_RETURN_IF_ERROR(run_.dp_comm->all_reduce(across, 2, comm::ReduceOp::kSum)->wait());
  *loss = static_cast<double>(across[0]) / run_.dp;
  stop_ = across[1] > 0;
  return Status::ok();
}

Result<engine::train::StepMetrics> PipelineRunner::step() {
  const engine::TrainOptions& tr = job_.training;
  engine::train::StepMetrics m;
  const auto t_step = Clock::now();
  trace::begin_step(step_ + 1);
  if (plugin_) PARTRAIN_RETURN_IF_ERROR(plugin_->step_begin(step_));
  // The schedule: this rank's actions, in order.
  double loss = 0;
  PARTRAIN_RETURN_IF_ERROR(run_actions(&m, &loss));
  loss /= shape_.m;
  // Each stage's gradients averaged over its dp group, then the tied embedding summed.
  if (plugin_) {
    trace::Span span("wait for gradient sync");
    PARTRAIN_RETURN_IF_ERROR(plugin_->grads_done(shape_.v == 1 ? chunks_[0].model->grads().ptr<float>() : nullptr));
  }
  if (tensor_) PARTRAIN_RETURN_IF_ERROR(tensor_->status());
  if (expert_) {  // the experts' gradients over the ranks holding the same experts, 1/dp
    PARTRAIN_RETURN_IF_ERROR(expert_->status());
    for (Chunk& c : chunks_) {
      PARTRAIN_RETURN_IF_ERROR(reduce_expert_grads(*expert_, *c.model, 1.0f / static_cast<float>(run_.dp)));
    }
  }
  PARTRAIN_RETURN_IF_ERROR(sum_tied_embeddings());
  PARTRAIN_RETURN_IF_ERROR(reduce_loss_and_stop(&loss));
  if (job_.model.moe_experts > 0) {  // each stage counted its own MoE blocks
    std::vector<const engine::model::MoeStats*> stats;
    for (const Chunk& c : chunks_) stats.push_back(&c.model->moe_stats());
    PARTRAIN_RETURN_IF_ERROR(sum_moe_stats(stats, aux_, shape_.m, *pipe_.pp_comm, run_.dp_comm, run_.dp, &m));
    m.experts = job_.model.moe_experts;
    m.ep = run_.ep;
  }
  double bubble = 0;
  PARTRAIN_RETURN_IF_ERROR(measure_bubble(*pipe_.pp_comm, shape_.pp, t_begin_, t_end_, busy_us_, &bubble));
  // Clip by the norm over all stages and take one AdamW step per chunk.
  const auto t_opt = Clock::now();
  m.lr = engine::train::lr_at(tr, step_);
  Result<float> norm = global_norm();
  if (!norm) return norm.status();
  {
    trace::Span span("optimizer");
    for (Chunk& c : chunks_) c.opt->step(m.lr, *norm);
  }
  m.opt_ms = ms_since(t_opt);
  if (tensor_) {  // the regions' collectives: all exposed (each is waited for)
    partrain_tensor_stats_v1_t ts{};
    PARTRAIN_RETURN_IF_ERROR(tensor_->step_end(&ts));
    m.add_comm(engine::train::CommAxis::kTp, ts.comm_ms, ts.comm_ms, static_cast<int>(ts.collectives));
  }
  if (expert_) {  // the all-to-alls, the norm's sum, the experts' gradients: all exposed
    partrain_expert_stats_v1_t es{};
    PARTRAIN_RETURN_IF_ERROR(expert_->step_end(&es));
    m.add_comm(engine::train::CommAxis::kEp, es.comm_ms, es.comm_ms, static_cast<int>(es.collectives));
  }
  if (plugin_) {
    partrain_sync_stats_v2_t stats{};
    PARTRAIN_RETURN_IF_ERROR(plugin_->step_end(&stats));
    m.add_comm(engine::train::CommAxis::kDp, stats.comm_ms, stats.exposed_ms,
               static_cast<int>(stats.collectives));
  }
  ++step_;
  tokens_ += static_cast<int64_t>(tr.global_batch) * job_.model.seq_len;
  m.step = step_;
  m.loss = loss;
  m.grad_norm = *norm;
  m.tokens = tokens_;
  m.dp = run_.dp;
  m.tp = run_.tp;
  m.step_ms = ms_since(t_step);
  const double step_tokens = static_cast<double>(tr.global_batch) * job_.model.seq_len;
  m.tokens_per_s = m.step_ms > 0 ? step_tokens / (m.step_ms / 1e3) : 0;
  m.tokens_per_s_per_rank = m.tokens_per_s / run_.world;
  if (flops_per_token_ > 0 && peak_flops_ > 0) {
    m.mfu = m.tokens_per_s * flops_per_token_ / (peak_flops_ * run_.world);
  }
  m.peak_bytes = be_->memory().peak;
  bubble_ = bubble;
  if (!std::isfinite(m.loss)) {
    return Status::internal(fmt::format("step {}: loss is {}; lower [training] lr or raise "
                                        "warmup_steps", m.step, m.loss));
  }
  return m;
}

void PipelineRunner::print_step(const engine::train::StepMetrics& m, double bubble) const {
  std::printf("step %5lld/%lld | loss %.6f | lr %.3e | norm %.4f | %8.0f tok/s | %7.1f ms | bubble %.1f%%",
              static_cast<long long>(m.step), static_cast<long long>(job_.training.steps), m.loss,
              static_cast<double>(m.lr), static_cast<double>(m.grad_norm), m.tokens_per_s, m.step_ms,
              100 * bubble);
  std::fputs(engine::train::step_summary(m).c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

Status PipelineRunner::run() {
  std::ofstream metrics;
  const bool writer = run_.rank == 0;  // only global rank 0 writes metrics.jsonl
  if (writer && !job_.run_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(job_.run_dir, ec);
    if (ec) return Status::io_error(job_.run_dir + ": cannot create the run folder: " + ec.message());
    PARTRAIN_RETURN_IF_ERROR(engine::train::open_metrics(job_.run_dir + "/metrics.jsonl", step_, &metrics));
  }
  for (int64_t s = step_; s < job_.training.steps; ++s) {
    log::set_step(s + 1);
    Result<engine::train::StepMetrics> m = step();
    if (!m) return m.status();
    // Checkpoint: dp rank d of each stage writes the d-th 1/dp of its chunks' flat buffers as
    // logical pieces (a tied head's copy of wte left to the first stage; under tp, tensors
    // every tp rank holds whole from tp rank 0 only), so the pieces of all ranks cover every
    // tensor once.
    const bool final = stop_ || m->step == job_.training.steps;
    if (saver_) {
      store::SaveProgress p{step_, tokens_, chunks_[0].opt->steps_taken(), data_->num_windows()};
      auto views = [&] {
        std::vector<store::PieceView> out;
        for (Chunk& c : chunks_) {
          for (store::PieceView& v : save_views(c)) out.push_back(std::move(v));
        }
        return out;
      };
      PARTRAIN_RETURN_IF_ERROR(saver_->save(p, job_.training, *be_, views, final, &*m));
    }
    trace::end_step(m->step);
    // The pipeline's own numbers: its point-to-point time (first transfer posted to the last
    // done), the part of it this rank waited for, and the measured bubble.
    const double pp_comm = p2p_any_ ? std::chrono::duration<double, std::milli>(p2p_last_ - p2p_first_).count() : 0;
    engine::train::StepMetrics line = *m;
    line.add_comm(engine::train::CommAxis::kPp, pp_comm, exposed_ms_, transfers_);
    if (metrics.is_open()) {
      std::string text = engine::train::metrics_json(line);
      text.pop_back();  // the closing brace
      text += fmt::format(",\"pp\":{},\"bubble_share\":{:.4f}}}", shape_.pp, bubble_);
      metrics << text << '\n' << std::flush;
    }
    if (writer && (m->step % std::max(1, job_.training.log_every) == 0 || m->step == job_.training.steps)) {
      print_step(line, bubble_);
    }
    if (stop_ && m->step < job_.training.steps) {
      return Status::unavailable(fmt::format("stopped at step {} (SIGTERM/SIGINT)", m->step));
    }
  }
  if (saver_) PARTRAIN_RETURN_IF_ERROR(saver_->wait());
  if (Status s = trace::flush(); !s) log::warn("worker", "{}", s.message());
  return Status::ok();
}

}  // namespace

Status train_pipeline_parallel(const PipelineRun& pipe) {
  const DataParallelRun& run = *pipe.run;
  PipelineRunner runner(pipe);
  Status s = runner.setup();
  if (s && run.resume != nullptr) s = runner.resume();
  if (s) s = runner.run();
  if (s && !run.job->run_dir.empty()) {
    s = write_memory(run.job->run_dir, run.rank, runner.memory());
  }
  // Peers blocked on us fail at once (before the runner frees buffers a receive may fill).
  if (!s && run.dp_comm != nullptr) run.dp_comm->abort(s.message());
  if (!s && pipe.pp_comm != nullptr) pipe.pp_comm->abort(s.message());
  if (!s && run.tp_comm != nullptr) run.tp_comm->abort(s.message());
  if (!s && run.ep_comm != nullptr) run.ep_comm->abort(s.message());
  if (!s && run.expert_dp_comm != nullptr) run.expert_dp_comm->abort(s.message());
  return s;
}

}  // namespace partrain::worker
