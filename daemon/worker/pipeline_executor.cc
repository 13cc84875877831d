// See pipeline_executor.h. run() is one step: post receives ahead, run the actions in
// order, wait for the sends, then measure the bubble.
#include "worker/pipeline_executor.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/trace.h"
#include "worker/group_sums.h"
#include "worker/pipeline_plan.h"

namespace partrain::worker {

namespace train = partrain::engine::train;
using pipeline::Action;
using pipeline::Kind;

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

PipelineExecutor::PipelineExecutor(const pipeline::Shape& shape, const std::vector<Action>& actions,
                                   const ProcessGroups* groups, comm::Communicator* pp_host, comm::Memory memory)
    : shape_(shape), actions_(actions), groups_(groups), pp_host_(pp_host), memory_(memory) {
  for (size_t i = 0; i < actions_.size(); ++i) {
    if (pipeline::is_recv(actions_[i].kind)) recvs_.push_back(i);
    transfers_ += pipeline::is_compute(actions_[i].kind) ? 0 : 1;
  }
}

PipelineExecutor::~PipelineExecutor() {
  if (trainer_ == nullptr) return;
  for (Chunk& c : chunks_) {
    for (engine::Tensor& t : c.grad_in) trainer_->backend().release(&t);
    for (engine::Tensor& t : c.grad_out) trainer_->backend().release(&t);
  }
}

Status PipelineExecutor::init(train::Trainer& trainer) {
  trainer_ = &trainer;
  engine::Backend& be = trainer.backend();
  chunks_.resize(trainer.parts().size());
  for (size_t i = 0; i < chunks_.size(); ++i) {
    Chunk& c = chunks_[i];
    engine::model::Model& m = model(static_cast<int>(i));
    // What crosses a stage boundary: the residual stream's rows this rank holds.
    const engine::Shape rows = m.stage_input(0).shape;
    count_ = static_cast<size_t>(rows.numel());
    auto buffers = [&](std::vector<engine::Tensor>* out, int n) -> Status {
      for (int k = 0; k < n; ++k) {
        Result<engine::Tensor> t = be.alloc(engine::MemCategory::kWorkspace, be.act_dtype(), rows);
        if (!t) return t.status();
        out->push_back(*t);
      }
      return Status::ok();
    };
    if (!m.last_stage()) PARTRAIN_RETURN_IF_ERROR(buffers(&c.grad_in, m.stage().slots));
    if (!m.first_stage()) PARTRAIN_RETURN_IF_ERROR(buffers(&c.grad_out, shape_.m));
    c.recv_act.resize(static_cast<size_t>(shape_.m));
    c.recv_grad.resize(static_cast<size_t>(shape_.m));
  }
  return Status::ok();
}

void PipelineExecutor::start_step() {
  for (size_t i = 0; i < chunks_.size(); ++i) {
    Chunk& c = chunks_[i];
    c.slot_of.assign(static_cast<size_t>(shape_.m), -1);
    c.free_slots.clear();
    for (int s = model(static_cast<int>(i)).stage().slots; s-- > 0;) c.free_slots.push_back(s);
    c.backwards = 0;
  }
  p2p_any_ = false;
  exposed_ms_ = 0;
  busy_us_ = 0;
  next_recv_ = 0;
  t_begin_ = trace::now_us();
}

// On a channel group rank 0 sends and 1 receives (process_groups.h).
comm::WorkHandle PipelineExecutor::transfer(PpStream stream, bool send, int peer, const engine::Tensor& t) {
  const int me = pp_host_->rank();
  comm::Communicator* c = send ? groups_->pp_channel(stream, me, peer) : groups_->pp_channel(stream, peer, me);
  if (c == nullptr) {
    return comm::finished_work(Status::internal(fmt::format(
        "pipeline: no {} channel from pp rank {} to {}", stream == PpStream::kActivation ? "activation" : "gradient",
        send ? me : peer, send ? peer : me)));
  }
  const comm::Buffer b{t.data, t.dtype, count_, memory_};
  return send ? c->send(b, 1) : c->recv(b, 0);
}

int PipelineExecutor::slot(Chunk& c, int mb) {
  int& s = c.slot_of[static_cast<size_t>(mb)];
  if (s < 0) {
    s = c.free_slots.back();
    c.free_slots.pop_back();
  }
  return s;
}

// Posts the receives of the rank's list in order, from the first not yet posted, while the
// next one has its buffer: a free activation slot (or the one its micro-batch holds) for
// activations, the micro-batch's slot (taken by its forward) for gradients. The one at the
// list's current action always has its buffer (the slot count came from the list's own
// order), so by the time an action runs its receive is posted.
void PipelineExecutor::post_receives() {
  for (; next_recv_ < recvs_.size(); ++next_recv_) {
    const Action& a = actions_[recvs_[next_recv_]];
    Chunk& c = chunks_[static_cast<size_t>(a.chunk)];
    const size_t mb = static_cast<size_t>(a.mb);
    if (a.kind == Kind::kRecvActivation) {
      if (c.slot_of[mb] < 0 && c.free_slots.empty()) return;
      c.recv_act[mb] = transfer(PpStream::kActivation, false, a.peer, model(a.chunk).stage_input(slot(c, a.mb)));
    } else {
      if (c.slot_of[mb] < 0) return;
      c.recv_grad[mb] = transfer(PpStream::kGrad, false, a.peer, c.grad_in[static_cast<size_t>(c.slot_of[mb])]);
    }
    if (!p2p_any_) p2p_first_ = Clock::now(), p2p_any_ = true;
  }
}

Status PipelineExecutor::wait_recv(comm::WorkHandle& h, const Action& a) {
  if (!h) return Status::internal("pipeline: " + pipeline::describe(a) + " with no receive posted");
  const int64_t t0 = trace::active() ? trace::now_us() : -1;
  const auto w0 = Clock::now();
  Status s = h->wait();
  p2p_last_ = Clock::now();
  exposed_ms_ += ms_between(w0, p2p_last_);
  if (t0 >= 0) trace::record("wait", trace::Lane::kComm, t0, trace::now_us(), "pp", a.mb);
  h.reset();
  return s;
}

// Every stage reads the micro-batch (the first its tokens, the last its targets, all the
// sample index that keys dropout).
Status PipelineExecutor::forward(int chunk, const Action& a, train::StepMetrics* m, double* loss, double* aux) {
  Chunk& c = chunks_[static_cast<size_t>(chunk)];
  const int s = slot(c, a.mb);
  Result<engine::model::MicroBatch> read = trainer_->read_micro_batch(a.mb, m);
  if (!read) return read.status();
  const engine::model::MicroBatch& batch = *read;
  Result<engine::model::LossParts> parts = model(chunk).forward(batch, s);
  if (!parts) return parts.status();
  *loss += parts->loss;  // the last stage's cross-entropy and every stage's aux loss
  *aux += parts->aux;
  return Status::ok();
}

Status PipelineExecutor::backward(int chunk, const Action& a) {
  Chunk& c = chunks_[static_cast<size_t>(chunk)];
  engine::model::Model& mod = model(chunk);
  const int s = slot(c, a.mb);
  const engine::Tensor dout = mod.last_stage() ? engine::Tensor{} : c.grad_in[static_cast<size_t>(s)];
  if (a.kind == Kind::kBackwardWeight) {
    mod.backward_weight(s);
  } else {
    mod.backward(s, 1.0f / static_cast<float>(shape_.m), dout,
                 a.kind == Kind::kBackwardInput ? engine::model::BackwardPart::kInput
                                                : engine::model::BackwardPart::kAll);
    if (!mod.first_stage()) trainer_->backend().copy(c.grad_out[static_cast<size_t>(a.mb)], mod.input_grad());
    if (a.kind == Kind::kBackwardInput) return Status::ok();  // the slot stays for the weight half
  }
  c.slot_of[static_cast<size_t>(a.mb)] = -1;
  c.free_slots.push_back(s);
  // The chunk's gradients are final: the data plugin reduces them under the rest of the schedule.
  if (++c.backwards == shape_.m && trainer_->hooks() != nullptr) {
    return trainer_->hooks()->part_grads_ready(chunk);
  }
  return Status::ok();
}

Status PipelineExecutor::run_action(const Action& a, train::StepMetrics* m, double* loss, double* aux) {
  Chunk& c = chunks_[static_cast<size_t>(a.chunk)];
  const auto t0 = Clock::now();
  switch (a.kind) {
    case Kind::kForward:
      PARTRAIN_RETURN_IF_ERROR(forward(a.chunk, a, m, loss, aux));
      m->fwd_ms += ms_between(t0, Clock::now());
      return Status::ok();
    case Kind::kBackward:
    case Kind::kBackwardInput:
    case Kind::kBackwardWeight:
      PARTRAIN_RETURN_IF_ERROR(backward(a.chunk, a));
      m->bwd_ms += ms_between(t0, Clock::now());
      return Status::ok();
    case Kind::kRecvActivation:
    case Kind::kRecvGrad:
      return Status::ok();  // posted by post_receives (at the latest just now)
    case Kind::kSendActivation:
      sends_.push_back(transfer(PpStream::kActivation, true, a.peer, model(a.chunk).stage_output(slot(c, a.mb))));
      return Status::ok();
    case Kind::kSendGrad:
      sends_.push_back(transfer(PpStream::kGrad, true, a.peer, c.grad_out[static_cast<size_t>(a.mb)]));
      return Status::ok();
    default:
      return Status::internal("pipeline: " + pipeline::describe(a) + " is not run by this runtime");
  }
}

Status PipelineExecutor::run(train::Trainer& trainer, train::StepMetrics* m, double* loss, double* aux) {
  trainer_ = &trainer;
  start_step();
  for (const Action& a : actions_) {
    Chunk& c = chunks_[static_cast<size_t>(a.chunk)];
    engine::model::Model& mod = model(a.chunk);
    // Receives go out ahead, in the list's order, as soon as their buffers are free.
    post_receives();
    // A compute action first waits for the receive it needs (exposed time, not busy).
    if (a.kind == Kind::kForward && !mod.first_stage()) {
      PARTRAIN_RETURN_IF_ERROR(wait_recv(c.recv_act[static_cast<size_t>(a.mb)], a));
    }
    if ((a.kind == Kind::kBackward || a.kind == Kind::kBackwardInput) && !mod.last_stage()) {
      PARTRAIN_RETURN_IF_ERROR(wait_recv(c.recv_grad[static_cast<size_t>(a.mb)], a));
    }
    const bool compute = pipeline::is_compute(a.kind);
    if (!compute && !p2p_any_) p2p_first_ = Clock::now(), p2p_any_ = true;
    const int64_t start = trace::now_us();
    PARTRAIN_RETURN_IF_ERROR(run_action(a, m, loss, aux));
    const int64_t end = trace::now_us();
    if (compute) {
      busy_us_ += end - start;
      if (trace::active()) trace::record(pipeline::short_label(a, shape_.v), trace::Lane::kCompute, start, end, {}, a.mb);
    }
    t_end_ = end;
  }
  // Every send's buffer was kept until here.
  const auto w0 = Clock::now();
  for (comm::WorkHandle& h : sends_) PARTRAIN_RETURN_IF_ERROR(h->wait());
  sends_.clear();
  if (p2p_any_) {
    const auto done = Clock::now();
    exposed_ms_ += ms_between(w0, done);
    p2p_last_ = std::max(p2p_last_, done);
  }
  PARTRAIN_RETURN_IF_ERROR(measure_bubble(*pp_host_, shape_.pp, t_begin_, t_end_, busy_us_, &m->bubble_share));
  m->add_comm(train::CommAxis::kPp, p2p_any_ ? ms_between(p2p_first_, p2p_last_) : 0.0, exposed_ms_, transfers_);
  return Status::ok();
}

// Every rank walks the same global order (micro-batch j, stages 0 .. S-1) and does its own
// stages of it, receiving each input from the stage before and sending each output to the
// stage after; a send's peer is always at the matching receive, so waiting for each
// transfer cannot deadlock. Forward-only with nothing to overlap, evaluation is one
// micro-batch in flight: its cost is eval_batches x S stage forwards, not a schedule's.
Status PipelineExecutor::evaluate(train::Trainer& trainer, int count, double* ce) {
  trainer_ = &trainer;
  const int stages = shape_.stages();
  for (int j = 0; j < count; ++j) {
    Result<engine::model::MicroBatch> batch = trainer.read_eval_batch(j);
    if (!batch) return batch.status();
    for (int stage = 0; stage < stages; ++stage) {
      if (shape_.rank_of(stage) != pp_host_->rank()) continue;
      engine::model::Model& mod = model(shape_.chunk_of(stage));
      if (stage > 0) {
        PARTRAIN_RETURN_IF_ERROR(
            transfer(PpStream::kActivation, false, shape_.rank_of(stage - 1), mod.stage_input(0))->wait());
      }
      Result<engine::model::LossParts> parts = mod.forward(*batch, 0);
      if (!parts) return parts.status();
      *ce += parts->ce;  // 0 but on the last stage
      if (stage + 1 < stages) {
        PARTRAIN_RETURN_IF_ERROR(
            transfer(PpStream::kActivation, true, shape_.rank_of(stage + 1), mod.stage_output(0))->wait());
      }
    }
  }
  return Status::ok();
}

}  // namespace partrain::worker
