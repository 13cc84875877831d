// Model: construction, the forward pass and the backward pass of the whole network.
// Blocks are in block.cc, mixture-of-experts feed-forward in moe.cc.
#include "engine/model/model.h"

#include <iterator>

#include <fmt/format.h>

#include "engine/model/block_records.h"
#include "engine/model/model_internal.h"
#include "engine/philox.h"

namespace partrain::engine::model {

Model::~Model() {
  for (Tensor& t : owned_) be_->release(&t);
}

Result<Tensor> Model::alloc(MemCategory cat, DType dtype, Shape shape) {
  Result<Tensor> t = be_->alloc(cat, dtype, shape);
  if (t) owned_.push_back(*t);
  return t;
}

Status Model::alloc_to(MemCategory cat, DType dtype, Shape shape, Tensor* out) {
  Result<Tensor> t = alloc(cat, dtype, shape);
  if (!t) return t.status();
  *out = *t;
  return Status::ok();
}

Tensor Model::param(int i) const {
  return pspan(i, table_.specs()[static_cast<size_t>(i)].shape);
}
Tensor Model::grad(int i) const {
  return gspan(i, table_.specs()[static_cast<size_t>(i)].shape);
}
Tensor Model::pspan(int i, Shape shape) const {
  if (i < 0) return Tensor{};
  const size_t g = static_cast<size_t>(seg_of_[static_cast<size_t>(i)]);
  return pseg_[g].slice(table_.specs()[static_cast<size_t>(i)].offset - seg_lo_[g], shape);
}
Tensor Model::gspan(int i, Shape shape) const {
  if (i < 0) return Tensor{};
  const size_t g = static_cast<size_t>(seg_of_[static_cast<size_t>(i)]);
  return gseg_[g].slice(table_.specs()[static_cast<size_t>(i)].offset - seg_lo_[g], shape);
}

static Status validate(const ModelOptions& o, const TensorOptions& tp, const ExpertOptions& ep,
                       const ContextOptions& cp) {
  auto bad = [](const std::string& what) { return Status::invalid("[model] " + what); };
  if (o.vocab_size < 2) return bad("vocab_size must be at least 2");
  if (o.seq_len < 1 || o.layers < 1 || o.hidden < 1 || o.heads < 1)
    return bad("seq_len, layers, hidden and heads must be positive");
  if (o.hidden % o.heads != 0)
    return bad(fmt::format("hidden {} is not divisible by heads {}; pick heads dividing hidden",
                           o.hidden, o.heads));
  if (o.heads % o.kv_heads != 0)
    return bad(fmt::format("heads {} is not divisible by kv_heads {}", o.heads, o.kv_heads));
  if (o.arch == Arch::kLlama && (o.hidden / o.heads) % 2 != 0)
    return bad("RoPE needs an even head dimension hidden/heads");
  if (o.dropout < 0.0f || o.dropout >= 1.0f) return bad("dropout must be in [0, 1)");
  if (o.moe_experts > 0 && (o.moe_top_k < 1 || o.moe_top_k > o.moe_experts))
    return bad(fmt::format("moe_top_k {} must be in 1..moe_experts ({})", o.moe_top_k,
                           o.moe_experts));
  if (o.moe_experts > 0 && o.moe_capacity_factor <= 0.0f)
    return bad("moe_capacity_factor must be positive");
  // Tensor parallel: the layout core checked heads, kv_heads, hidden and seq_len against tp
  // before anything ran; these are the engine's own preconditions.
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    return bad(fmt::format("tensor-parallel rank {} of {}", tp.rank, tp.size));
  if (tp.size > 1) {
    const int F = o.ffn_hidden;
    if (o.heads % tp.size != 0 || o.kv_heads % tp.size != 0 || F % tp.size != 0)
      return bad(fmt::format("heads {}, kv_heads {} and ffn_hidden {} must be multiples of tp {}; "
                             "pick a tp dividing them", o.heads, o.kv_heads, F, tp.size));
    if (vocab_rows(o.vocab_size, tp.size - 1, tp.size).second < 1)
      return bad(fmt::format("vocab_size {} leaves tensor-parallel rank {} no vocabulary rows "
                             "(ceil(V/tp) each); pick a smaller tp", o.vocab_size, tp.size - 1));
    if (tp.sp && (o.seq_len / cp.size) % tp.size != 0)
      return bad(fmt::format("seq_len {} must be a multiple of tp {}{} under sequence parallelism; "
                             "add nosp or pick another tp", o.seq_len, tp.size,
                             cp.size > 1 ? fmt::format(" x cp {}", cp.size) : ""));
    if (o.moe_experts > 0 && (o.seq_len / cp.size) % tp.size != 0)
      return bad(fmt::format("seq_len {} must be a multiple of tp {}{} on a mixture-of-experts model: each tp "
                             "rank routes its own 1/tp of every micro-batch's tokens; pick another tp",
                             o.seq_len, tp.size, cp.size > 1 ? fmt::format(" x cp {}", cp.size) : ""));
  }
  // Expert parallel: the layout core checked experts % ep; these are the engine's own.
  if (ep.size < 1 || ep.rank < 0 || ep.rank >= ep.size)
    return bad(fmt::format("expert-parallel rank {} of {}", ep.rank, ep.size));
  if (ep.size > 1 && (o.moe_experts == 0 || o.moe_experts % ep.size != 0))
    return bad(fmt::format("moe_experts {} is not a multiple of ep {}; pick an ep dividing the "
                           "experts", o.moe_experts, ep.size));
  // Context parallel: the layout core checked seq_len % 2cp; the engine's own preconditions.
  if (cp.size < 1 || cp.rank < 0 || cp.rank >= cp.size)
    return bad(fmt::format("context-parallel rank {} of {}", cp.rank, cp.size));
  if (cp.size > 1 && o.seq_len % (2 * cp.size) != 0)
    return bad(fmt::format("seq_len {} must be a multiple of 2 x cp {} (every sequence is cut into 2cp "
                           "chunks); pick a seq_len or cp that fits", o.seq_len, cp.size));
  return Status::ok();
}

Result<std::unique_ptr<Model>> Model::create(const ModelOptions& options, Backend* backend,
                                             int max_batch, uint64_t seed,
                                             const ShardOptions& shard,
                                             const TensorOptions& tp,
                                             const ExpertOptions& ep,
                                             const StageOptions& stage,
                                             const ContextOptions& cp) {
  const ModelOptions o = resolved(options);
  TensorOptions t = tp;
  if (t.size == 1) t.sp = false;
  PARTRAIN_RETURN_IF_ERROR(validate(o, t, ep, cp));
  if (ep.size > 1 && (backend->param_dtype() != DType::kF32 || backend->act_dtype() != DType::kF32)) {
    return Status::invalid(fmt::format("expert parallelism runs on fp32 (CPU) ranks in this "
                                       "version; the {} backend keeps lower precision", backend->name()));
  }
  if (t.size > 1 && (backend->param_dtype() != DType::kF32 || backend->act_dtype() != DType::kF32)) {
    return Status::invalid(fmt::format("tensor parallelism runs on fp32 (CPU) ranks in this "
                                       "version; the {} backend keeps lower precision", backend->name()));
  }
  if (cp.size > 1 && (backend->param_dtype() != DType::kF32 || backend->act_dtype() != DType::kF32)) {
    return Status::invalid(fmt::format("context parallelism runs on fp32 (CPU) ranks in this "
                                       "version; the {} backend keeps lower precision", backend->name()));
  }
  if (max_batch < 1) return Status::invalid("micro_batch must be at least 1");
  const int hi = stage.end_block < 0 ? o.layers : stage.end_block;
  if (stage.first_block < 0 || stage.first_block >= hi || hi > o.layers || stage.slots < 1) {
    return Status::invalid(fmt::format("pipeline stage of blocks [{}, {}) with {} slots: need "
                                       "0 <= first < end <= layers ({}) and a slot", stage.first_block,
                                       hi, stage.slots, o.layers));
  }
  std::unique_ptr<Model> m(new Model());
  m->stage_ = stage;
  m->lo_ = stage.first_block;
  m->hi_ = hi;
  m->o_ = o;
  m->be_ = backend;
  m->seed_ = seed;
  m->shard_ = shard;
  m->tp_ = t;
  m->ep_ = ep;
  m->cp_ = cp;
  m->T_ = o.seq_len / cp.size;
  m->chunk_pos_ = context_positions(o.seq_len, cp.rank, cp.size);
  m->regions_ = Regions(nullptr, t);
  m->table_ = build_stage_table(o, t, ep, stage);
  // Local widths: heads and the MLP split evenly, the vocabulary by vocab_rows.
  const int hd = o.hidden / o.heads;
  m->lh_ = o.heads / t.size, m->lkv_ = o.kv_heads / t.size, m->lq_ = m->lh_ * hd;
  m->lqkv_ = (m->lh_ + 2 * m->lkv_) * hd;
  m->lf_ = o.ffn_hidden / t.size, m->lfc_ = o.arch == Arch::kGpt2 ? m->lf_ : 2 * m->lf_;
  const auto [v0, vn] = vocab_rows(o.vocab_size, t.rank, t.size);
  m->v0_ = v0, m->lv_ = static_cast<int>(vn);
  PARTRAIN_RETURN_IF_ERROR(m->allocate(max_batch));
  std::vector<float> host(static_cast<size_t>(m->table_.total()));
  init_params(m->table_, seed, host.data());
  m->params_from_host(host);
  return m;
}

void Model::set_tensor_comm(TensorComm* comm) { regions_ = Regions(comm, tp_); }

int Model::moe_index(int l) const {
  int i = 0;
  for (int j = 0; j < l; ++j) i += is_moe_layer(o_, j) ? 1 : 0;
  return i;
}

void Model::reset_moe_stats() {
  int blocks = 0;
  for (int l = 0; l < o_.layers; ++l) blocks += is_moe_layer(o_, l) ? 1 : 0;
  moe_stats_.tokens.assign(static_cast<size_t>(blocks) * static_cast<size_t>(o_.moe_experts), 0);
  moe_stats_.dropped = 0;
}

void Model::index_params() {
  auto idx = [&](const std::string& name) { return table_.find(name); };
  const bool gpt2 = o_.arch == Arch::kGpt2;
  wte_ = idx(gpt2 ? "wte.weight" : "model.embed_tokens.weight");
  wpe_ = gpt2 ? idx("wpe.weight") : -1;
  lnf_w_ = idx(gpt2 ? "ln_f.weight" : "model.norm.weight");
  lnf_b_ = gpt2 ? idx("ln_f.bias") : -1;
  head_ = o_.tie_embeddings ? wte_ : idx("lm_head.weight");
  bp_.assign(static_cast<size_t>(o_.layers), BlockParams{});
  for (int l = 0; l < o_.layers; ++l) {
    BlockParams& p = bp_[static_cast<size_t>(l)];
    if (gpt2) {
      const std::string h = "h." + std::to_string(l) + ".";
      p.ln1_w = idx(h + "ln_1.weight"), p.ln1_b = idx(h + "ln_1.bias");
      p.qkv_w = idx(h + "attn.c_attn.weight"), p.qkv_b = idx(h + "attn.c_attn.bias");
      p.o_w = idx(h + "attn.c_proj.weight"), p.o_b = idx(h + "attn.c_proj.bias");
      p.ln2_w = idx(h + "ln_2.weight"), p.ln2_b = idx(h + "ln_2.bias");
      p.fc_w = idx(h + "mlp.c_fc.weight"), p.fc_b = idx(h + "mlp.c_fc.bias");
      p.proj_w = idx(h + "mlp.c_proj.weight"), p.proj_b = idx(h + "mlp.c_proj.bias");
      p.router = idx(h + "mlp.router.weight");
      for (int j = 0; j < local_experts(o_.moe_experts, ep_) && p.router >= 0; ++j) {
        const int e = first_local_expert(o_.moe_experts, ep_) + j;  // this rank's experts
        const std::string x = h + "mlp.experts." + std::to_string(e) + ".";
        p.expert_fc_w.push_back(idx(x + "c_fc.weight"));
        p.expert_fc_b.push_back(idx(x + "c_fc.bias"));
        p.expert_proj_w.push_back(idx(x + "c_proj.weight"));
        p.expert_proj_b.push_back(idx(x + "c_proj.bias"));
      }
    } else {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      p.ln1_w = idx(h + "input_layernorm.weight");
      p.qkv_w = idx(h + "self_attn.q_proj.weight");  // q, k, v are consecutive: one GEMM
      p.o_w = idx(h + "self_attn.o_proj.weight");
      p.ln2_w = idx(h + "post_attention_layernorm.weight");
      p.fc_w = idx(h + "mlp.gate_proj.weight");  // gate, up consecutive: one [2F, C] GEMM
      p.proj_w = idx(h + "mlp.down_proj.weight");
      p.router = idx(h + "block_sparse_moe.gate.weight");
      for (int j = 0; j < local_experts(o_.moe_experts, ep_) && p.router >= 0; ++j) {
        const int e = first_local_expert(o_.moe_experts, ep_) + j;
        const std::string x = h + "block_sparse_moe.experts." + std::to_string(e) + ".";
        p.expert_fc_w.push_back(idx(x + "w1.weight"));  // w1 (gate), w3 (up) consecutive
        p.expert_fc_b.push_back(-1);
        p.expert_proj_w.push_back(idx(x + "w2.weight"));
        p.expert_proj_b.push_back(-1);
      }
    }
  }
}

Status Model::allocate(int max_batch) {
  index_params();
  reset_moe_stats();
  max_batch_ = max_batch;
  // This rank's widths (all of the model's on one rank); NR: the residual stream's rows.
  const int64_t N = static_cast<int64_t>(max_batch) * T_, C = o_.hidden;
  const int64_t NR = tp_.sp ? N / tp_.size : N;
  const int64_t V = lv_, QKV = lqkv_, Q = lq_, F = lf_, FC = lfc_;
  const DType ad = be_->act_dtype();
  using MC = MemCategory;
  auto get = [&](MC c, DType d, Shape s, Tensor* out) { return alloc_to(c, d, s, out); };
  PARTRAIN_RETURN_IF_ERROR(allocate_storage());
  // What recompute frees is allocated once and shared by all blocks (and slots): selective
  // shares the attention core (att, lse); full shares everything but the block inputs
  // res_[l], and recomputes the block in backward.
  BlockActs shared;
  if (stage_.split_backward) PARTRAIN_RETURN_IF_ERROR(check_split_backward());
  PARTRAIN_RETURN_IF_ERROR(alloc_block_acts(shared, o_.recompute != Recompute::kNone,
                                            o_.recompute == Recompute::kFull));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, C}, &shared.branch));
  // The micro-batch activations, once per slot.
  slots_.clear();
  for (int k = 0; k < stage_.slots; ++k) {
    PARTRAIN_RETURN_IF_ERROR(allocate_slot(shared));
    slots_.push_back(std::make_unique<ActSlot>());
    swap_slot(*slots_.back());  // the slot takes what was allocated, the members its blanks
  }
  slot_ = -1;
  use_slot(0);
  if (o_.recompute == Recompute::kFull) PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {NR, C}, &res_scratch_));
  // Backward scratch, shared by all blocks.
  if (last_stage()) {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, DType::kF32, {N}, &dloss_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, V}, &dlogits_));
  }
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {NR, C}, &dres_));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, C}, &dln_));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {NR, C}, &dbranch_));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, Q}, &datt_));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, QKV}, &dqkv_));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, FC}, &dfc_));
  PARTRAIN_RETURN_IF_ERROR(get(MC::kWorkspace, ad, {N, F}, &dact_));
  host_losses_.resize(static_cast<size_t>(N));
  if (tp_.size > 1) PARTRAIN_RETURN_IF_ERROR(tp_allocate(N, C));
  PARTRAIN_RETURN_IF_ERROR(moe_tp_allocate());
  if (cp_.size > 1) PARTRAIN_RETURN_IF_ERROR(cp_allocate(N));
  return Status::ok();
}

namespace {

// BlockActs' member for each of block_records.h's records, in its order.
constexpr Tensor BlockActs::*kRecordMembers[] = {
    &BlockActs::att, &BlockActs::lse, &BlockActs::ln1, &BlockActs::ln1_mean, &BlockActs::ln1_rstd,
    &BlockActs::qkv, &BlockActs::res2, &BlockActs::ln2, &BlockActs::ln2_mean, &BlockActs::ln2_rstd,
    &BlockActs::fc, &BlockActs::act};
static_assert(std::size(kRecordMembers) == kNumBlockRecords, "one member per block record");

}  // namespace

// The records of block_records.h, the list the planner sizes memory by: the core group when
// `core`, the rest when `rest`.
Status Model::alloc_block_acts(BlockActs& a, bool core, bool rest) {
  const int64_t N = static_cast<int64_t>(max_batch_) * T_, C = o_.hidden;
  const int64_t NR = tp_.sp ? N / tp_.size : N;
  const DType ad = be_->act_dtype();
  for (size_t i = 0; i < kNumBlockRecords; ++i) {
    const BlockRecord& r = kBlockRecords[i];
    if (!(r.group == RecordGroup::kCore ? core : rest)) continue;
    const int64_t cols = r.cols == RecordCols::kHidden  ? C
                         : r.cols == RecordCols::kQuery ? lq_
                         : r.cols == RecordCols::kQkv   ? lqkv_
                         : r.cols == RecordCols::kFc    ? lfc_
                         : r.cols == RecordCols::kFfn   ? lf_
                         : r.cols == RecordCols::kSeq   ? T_
                                                        : 1;
    Shape shape = r.rows == RecordRows::kBatchHeads ? Shape{max_batch_, lh_, cols}
                  : r.cols == RecordCols::kNone     ? Shape{r.rows == RecordRows::kTokens ? N : NR}
                                                    : Shape{r.rows == RecordRows::kTokens ? N : NR, cols};
    const DType d = r.type == RecordType::kF32 ? DType::kF32 : ad;
    PARTRAIN_RETURN_IF_ERROR(alloc_to(MemCategory::kActivations, d, shape, &(a.*kRecordMembers[i])));
  }
  return Status::ok();
}

// One micro-batch's activations, into the members: the stage's residual stream
// res_[lo_..hi_], its blocks' records, and the head's buffers on the last stage.
Status Model::allocate_slot(const BlockActs& shared) {
  const int64_t N = static_cast<int64_t>(max_batch_) * T_, C = o_.hidden;
  const int64_t NR = tp_.sp ? N / tp_.size : N;
  const int L = o_.layers;
  const DType ad = be_->act_dtype();
  using MC = MemCategory;
  auto get = [&](MC c, DType d, Shape s, Tensor* out) { return alloc_to(c, d, s, out); };
  if (first_stage()) PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kI32, {N}, &tokens_));
  if (last_stage()) PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kI32, {N}, &targets_));
  res_.assign(static_cast<size_t>(L + 1), Tensor{});
  for (int l = lo_; l <= hi_; ++l) {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, ad, {NR, C}, &res_[static_cast<size_t>(l)]));
  }
  acts_.clear();
  moe_.clear();
  for (int l = 0; l < L; ++l) {
    const bool held = l >= lo_ && l < hi_;
    std::unique_ptr<BlockActs> a;
    if (held) {
      a = std::make_unique<BlockActs>(shared);
      PARTRAIN_RETURN_IF_ERROR(alloc_block_acts(*a, o_.recompute == Recompute::kNone,
                                                o_.recompute != Recompute::kFull));
    }
    acts_.push_back(std::move(a));
    std::unique_ptr<MoeState> s;
    if (held && bp_[static_cast<size_t>(l)].router >= 0) {
      s = std::make_unique<MoeState>();
      PARTRAIN_RETURN_IF_ERROR(moe_allocate(l, *s));
    }
    moe_.push_back(std::move(s));
  }
  if (tp_.size > 1) {  // the vocabulary-parallel lookup's per-micro-batch tokens and mask
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kI32, {N}, &tok_local_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kF32, {N}, &tok_mask_));
  }
  if (last_stage()) {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, ad, {NR, C}, &lnf_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kF32, {NR}, &lnf_mean_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kF32, {NR}, &lnf_rstd_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, ad, {N, lv_}, &logits_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kF32, {N}, &losses_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kActivations, DType::kF32, {N}, &lse_));
  }
  if (stage_.split_backward) PARTRAIN_RETURN_IF_ERROR(allocate_weight_grad_inputs());
  return Status::ok();
}

void Model::swap_slot(ActSlot& s) {
  std::swap(tokens_, s.tokens);
  std::swap(targets_, s.targets);
  std::swap(res_, s.res);
  std::swap(acts_, s.acts);
  std::swap(moe_, s.moe);
  std::swap(lnf_, s.lnf);
  std::swap(lnf_mean_, s.lnf_mean);
  std::swap(lnf_rstd_, s.lnf_rstd);
  std::swap(logits_, s.logits);
  std::swap(losses_, s.losses);
  std::swap(lse_, s.lse);
  std::swap(batch_, s.batch);
  std::swap(B_, s.B);
  std::swap(N_, s.N);
  std::swap(R_, s.R);
  std::swap(loss_count_, s.loss_count);
  std::swap(aux_loss_, s.aux_loss);
  std::swap(wgrad_dout_, s.wgrad_dout);
  std::swap(wgrad_inp_, s.wgrad_inp);
  std::swap(tok_local_, s.tok_local);
  std::swap(tok_mask_, s.tok_mask);
  std::swap(host_i_, s.host_targets);
  std::swap(deferred_, s.deferred);
}

// The slot in use lives in the members; the others in slots_ (slots_[slot_] is blank).
void Model::use_slot(int slot) {
  if (slot == slot_) return;
  if (slot_ >= 0) swap_slot(*slots_[static_cast<size_t>(slot_)]);
  swap_slot(*slots_[static_cast<size_t>(slot)]);
  slot_ = slot;
}

Tensor Model::stage_input(int slot) {
  use_slot(slot);
  return res_[static_cast<size_t>(lo_)];
}

Tensor Model::stage_output(int slot) {
  use_slot(slot);
  return res_[static_cast<size_t>(hi_)];
}

Tensor Model::input_grad() const { return dres_; }

// ---- forward ------------------------------------------------------------------------------

Result<LossParts> Model::forward(const MicroBatch& batch) { return forward(batch, 0); }

Result<LossParts> Model::forward(const MicroBatch& batch, int slot) {
  if (slot < 0 || slot >= stage_.slots) {
    return Status::invalid(fmt::format("activation slot {} of a stage with {}", slot, stage_.slots));
  }
  use_slot(slot);
  if (batch.B < 1 || batch.B > max_batch_) {
    return Status::invalid(fmt::format("micro-batch of {} sequences; this model was built for "
                                       "1..{}", batch.B, max_batch_));
  }
  batch_ = batch;
  B_ = batch.B;
  N_ = B_ * T_;
  R_ = tp_.sp ? N_ / tp_.size : N_;
  const int C = o_.hidden, V = o_.vocab_size, L = o_.layers;
  aux_loss_ = 0.0f;
  recomputing_ = false;
  // The batch goes to the device (under cp this rank's rows of it); every token of the
  // whole sequences is checked against the vocabulary.
  const Tensor tokens = first_stage() ? tokens_.slice(0, {N_}) : Tensor{};
  const Tensor targets = last_stage() ? targets_.slice(0, {N_}) : Tensor{};
  const int whole = B_ * o_.seq_len;
  for (int n = 0; n < whole; ++n) {
    if (batch.inputs[n] < 0 || batch.inputs[n] >= V || batch.targets[n] >= V) {
      return Status::invalid(fmt::format("token {} at position {} is outside the vocabulary "
                                         "(vocab_size {})", batch.inputs[n], n, V));
    }
  }
  const MicroBatch rows = local_rows(batch);
  shard_forward_begin();
  if (first_stage()) be_->to_device_i32(tokens, rows.inputs);
  if (last_stage()) be_->to_device_i32(targets, rows.targets);
  if (regions_.active()) vp_prepare(rows);

  // Token (+ position) embeddings, then dropout, into the residual stream (this rank's
  // rows under sequence parallelism). A later pipeline stage finds its input there.
  if (first_stage()) {
    const Tensor x0 = ract(res_[0]);
    if (regions_.active()) {
      vp_embedding_forward(x0);
    } else if (cp_.size > 1) {  // learned positions at this rank's global positions
      be_->embedding_forward(x0, tokens, param(wte_), Tensor{}, B_, T_, C);
      positions_forward(x0);
    } else {
      be_->embedding_forward(x0, tokens, param(wte_), wpe_ >= 0 ? param(wpe_) : Tensor{}, B_, T_, C);
    }
    dropout(x0, L, 0);
  }
  // The blocks (ZeRO-3 gathers each one's parameters just before it runs).
  for (int l = lo_; l < hi_; ++l) {
    shard_block_begin(l, false);
    block_forward(l, ract(res_[l]), ract(res_[l + 1]), *acts_[l]);
    shard_block_end(l, false);
  }
  if (!last_stage()) {  // a pipeline stage before the last: its output is res_[hi_]
    LossParts parts;
    parts.aux = aux_loss_;
    parts.loss = aux_loss_;
    shard_forward_end();
    return parts;
  }
  // Final norm, LM head (tied to wte for GPT-2; this rank's vocabulary rows under tp),
  // per-token cross-entropy.
  const Tensor lnf = ract(lnf_);
  norm_forward(lnf, lnf_mean_, lnf_rstd_, ract(res_[L]), lnf_w_, lnf_b_);
  const Tensor x = regions_.enter_forward(lnf, act(gathered_));
  const Tensor logits = logits_.slice(0, {N_, lv_});
  be_->matmul_forward(logits, x, param(head_), Tensor{}, N_, C, lv_);
  // The mean over the B*T tokens (those with a target: a target < 0 is ignored, as
  // PyTorch's ignore_index), summed on the host in double for a reproducible value.
  double sum = 0.0;
  if (regions_.active()) {
    sum = vp_loss_forward(logits);
  } else {
    be_->crossentropy_forward(losses_.slice(0, {N_}), lse_.slice(0, {N_}), logits, targets, N_, V);
    be_->to_host(host_losses_.data(), losses_.slice(0, {N_}));
    for (int n = 0; n < N_; ++n) sum += host_losses_[static_cast<size_t>(n)];
  }
  // The mean is over the micro-batch's counted tokens, also under cp (each cp rank's sum
  // over its rows, divided by the whole count, is its share of the mean).
  loss_count_ = 0;
  for (int n = 0; n < whole; ++n) loss_count_ += batch.targets[n] >= 0 ? 1 : 0;
  LossParts parts;
  parts.ce = loss_count_ > 0 ? static_cast<float>(sum / loss_count_) : 0.0f;
  parts.aux = aux_loss_;
  parts.loss = parts.ce + parts.aux;
  shard_forward_end();
  return parts;
}

// ---- backward -----------------------------------------------------------------------------

void Model::backward(float scale, const std::function<void(int)>& block_done) {
  use_slot(0);
  backward_stage(scale, block_done, Tensor{});
}

void Model::backward(int slot, float scale, const Tensor& dout, BackwardPart part) {
  use_slot(slot);
  part_ = part;
  backward_stage(scale, {}, dout);
  part_ = BackwardPart::kAll;
}

void Model::backward_stage(float scale, const std::function<void(int)>& block_done, const Tensor& dout) {
  const int C = o_.hidden, L = o_.layers;
  // Under cp the gradient is cp times this rank's share, so that the average over the
  // dp x cp group is the global batch's (context_parallel.h).
  backward_scale_ = scale * static_cast<float>(cp_.size);
  shard_backward_begin();
  const Tensor dres = ract(dres_);
  if (!last_stage()) {
    // A pipeline stage before the last: the gradient of its output came from the next.
    be_->copy(dres, dout.slice(0, dres.shape));
  } else {
    head_backward(backward_scale_, dres);
    if (block_done) block_done(L);  // the final norm and an untied head are final now
  }
  // The blocks in reverse; dres carries d loss / d res_[l] down.
  for (int l = hi_ - 1; l >= lo_; --l) {
    BlockActs& a = *acts_[l];
    shard_block_begin(l, true);
    if (o_.recompute == Recompute::kFull) {
      // Rebuild this block's activations from its stored input (bit-identical to forward).
      recomputing_ = true;
      block_forward(l, ract(res_[l]), ract(res_scratch_), a);
      recomputing_ = false;
    }
    block_backward(l, ract(res_[l]), dres, a);
    shard_block_end(l, true);
    if (block_done) block_done(l);
  }
  // Embedding dropout, then token (and position) embeddings; a later pipeline stage keeps
  // the gradient of its input in dres (input_grad()).
  if (first_stage()) {
    const Tensor demb = dropout_grad(dres, L, 0);
    if (regions_.active()) {
      vp_embedding_backward(demb);
    } else if (cp_.size > 1) {
      be_->embedding_backward(grad(wte_), Tensor{}, demb, tokens_.slice(0, {N_}), B_, T_, C);
      positions_backward(demb);
    } else {
      be_->embedding_backward(grad(wte_), wpe_ >= 0 ? grad(wpe_) : Tensor{}, demb,
                              tokens_.slice(0, {N_}), B_, T_, C);
    }
  }
  shard_backward_end();
}

// Cross-entropy, LM head, final norm: dres = d (scale * loss) / d res_[L].
void Model::head_backward(float scale, const Tensor& dres) {
  const int C = o_.hidden, V = o_.vocab_size, L = o_.layers;
  // d loss / d loss_n = scale / (number of counted tokens); ignored ones get no gradient.
  const Tensor dloss = dloss_.slice(0, {N_});
  be_->fill(dloss, loss_count_ > 0 ? scale / static_cast<float>(loss_count_) : 0.0f);
  // Cross-entropy, LM head, final norm: dres = d loss / d res_[L].
  const Tensor dlogits = dlogits_.slice(0, {N_, lv_});
  be_->zero(dlogits);
  if (regions_.active()) {
    vp_loss_backward(dlogits, dloss);
  } else {
    be_->crossentropy_backward(dlogits, logits_.slice(0, {N_, V}), lse_.slice(0, {N_}),
                               targets_.slice(0, {N_}), dloss, N_, V);
  }
  // Sequence parallel: the head's input is gathered again (the rows alone were kept).
  const Tensor x = regions_.enter_forward(ract(lnf_), act(gathered_));
  const Tensor dx = act(dln_);
  be_->zero(dx);
  linear_backward(site(hi_, 0), dx, head_, -1, table_.specs()[static_cast<size_t>(head_)].shape, {}, dlogits,
                  x, N_, C, lv_);
  const Tensor dlnf = regions_.enter_backward(dx, ract(drows_));
  be_->zero(dres);
  norm_backward(dres, lnf_w_, lnf_b_, dlnf, ract(res_[L]), lnf_mean_, lnf_rstd_);
  shard_tail_grads_done();
}

std::pair<int64_t, int64_t> Model::segment_range(int s) const {
  if (s == o_.layers + 1) return {0, block_param_range(lo_).first};
  return block_param_range(s);
}

// A pipeline stage's table holds blocks [lo_, hi_) only; the others are empty ranges.
std::pair<int64_t, int64_t> Model::block_param_range(int l) const {
  const std::vector<ParamSpec>& s = table_.specs();
  const int64_t tail = last_stage() ? s[static_cast<size_t>(lnf_w_)].offset : table_.total();
  if (l == o_.layers) return {tail, table_.total()};
  if (l < lo_) {
    const int64_t at = s[static_cast<size_t>(bp_[static_cast<size_t>(lo_)].ln1_w)].offset;
    return {at, at};
  }
  if (l >= hi_) return {tail, tail};
  const int64_t first = s[static_cast<size_t>(bp_[static_cast<size_t>(l)].ln1_w)].offset;
  const int64_t end = l + 1 < hi_ ? s[static_cast<size_t>(bp_[static_cast<size_t>(l) + 1].ln1_w)].offset : tail;
  return {first, end};
}

// ---- shared helpers -----------------------------------------------------------------------

Tensor Model::act(const Tensor& t) const {
  Shape s = t.shape;
  s.dims[0] = t.shape.ndim == 3 ? B_ : static_cast<int64_t>(N_);
  return t.slice(0, s);
}

Tensor Model::ract(const Tensor& t) const {
  Shape s = t.shape;
  s.dims[0] = R_;
  return t.slice(0, s);
}

void Model::norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                         const Tensor& inp, int w, int b) {
  const int C = o_.hidden;
  if (o_.arch == Arch::kGpt2) {
    be_->layernorm_forward(out, mean.slice(0, {R_}), rstd.slice(0, {R_}), inp, param(w),
                           b >= 0 ? param(b) : Tensor{}, R_, C, o_.norm_eps);
  } else {
    be_->rmsnorm_forward(out, rstd.slice(0, {R_}), inp, param(w), R_, C, o_.norm_eps);
  }
}

void Model::residual_norm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                  const Tensor& a, const Tensor& b, int w, int bias) {
  const int C = o_.hidden;
  if (o_.arch == Arch::kGpt2) {
    be_->residual_layernorm_forward(res, out, mean.slice(0, {R_}), rstd.slice(0, {R_}), a, b, param(w),
                                    bias >= 0 ? param(bias) : Tensor{}, R_, C, o_.norm_eps);
  } else {
    be_->residual_rmsnorm_forward(res, out, rstd.slice(0, {R_}), a, b, param(w), R_, C, o_.norm_eps);
  }
}

void Model::norm_backward(const Tensor& dinp, int w, int b, const Tensor& dout,
                          const Tensor& inp, const Tensor& mean, const Tensor& rstd) {
  const int C = o_.hidden;
  // Sequence parallel: this rank's rows give part of the norm's parameter gradient; it is
  // summed over the group (in a scratch, so earlier micro-batches are not summed again).
  const bool partial = regions_.active() && tp_.sp;
  const Tensor dw = partial ? norm_scratch_.slice(0, {C}) : grad(w);
  const Tensor db = b < 0 ? Tensor{} : partial ? norm_scratch_.slice(C, {C}) : grad(b);
  if (partial) be_->zero(norm_scratch_);
  if (o_.arch == Arch::kGpt2) {
    be_->layernorm_backward(dinp, dw, db, dout, inp, param(w), mean.slice(0, {R_}),
                            rstd.slice(0, {R_}), R_, C);
  } else {
    be_->rmsnorm_backward(dinp, dw, dout, inp, param(w), rstd.slice(0, {R_}), R_, C);
  }
  if (partial) {
    regions_.comm()->all_reduce_sum(norm_scratch_.slice(0, {b < 0 ? C : 2 * C}));
    be_->accumulate(grad(w), dw);
    if (b >= 0) be_->accumulate(grad(b), db);
  }
}

uint64_t Model::dropout_key(int layer, int site) const {
  return philox_key(seed_ ^ 0x64726f70ull /* "drop" */, static_cast<uint64_t>(batch_.step),
                    static_cast<uint64_t>(layer) * 4 + static_cast<uint64_t>(site));
}

// Element (row, c) of the residual stream draws its mask at (logical row) * C + c, the
// logical row being (sample * seq_len + position): each run of rows with consecutive
// logical rows is one call (one run unless cp cuts the sequences into chunks).
void Model::dropout(const Tensor& t, int layer, int site) {
  if (o_.dropout <= 0.0f || !batch_.train) return;
  const int64_t C = o_.hidden, row0 = tp_row0();
  for_each_logical_run(static_cast<int>(row0), R_, [&](int row, int count, uint64_t logical) {
    const Tensor part = t.slice((row - row0) * C, {count, C});
    be_->dropout_forward(part, part, o_.dropout, dropout_key(layer, site), logical * static_cast<uint64_t>(C));
  });
}

Tensor Model::dropout_grad(const Tensor& dout, int layer, int site) {
  if (o_.dropout <= 0.0f || !batch_.train) return dout;
  const Tensor d = ract(dbranch_);
  be_->zero(d);
  const int64_t C = o_.hidden, row0 = tp_row0();
  for_each_logical_run(static_cast<int>(row0), R_, [&](int row, int count, uint64_t logical) {
    const int64_t at = (row - row0) * C;
    be_->dropout_backward(d.slice(at, {count, C}), dout.slice(at, {count, C}), o_.dropout,
                          dropout_key(layer, site), logical * static_cast<uint64_t>(C));
  });
  return d;
}

}  // namespace partrain::engine::model
