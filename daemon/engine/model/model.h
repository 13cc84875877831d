// The transformer: GPT-2 or LLaMA style, optionally with mixture-of-experts blocks, written
// once against engine::Backend. llm.c's structure: one flat parameter buffer and one flat
// gradient buffer (views per tensor), activations allocated once for the micro-batch size,
// forward() computes the loss, backward() accumulates gradients.
//
// Loss: the mean cross-entropy over the B*T tokens of the micro-batch (a target < 0 is
// ignored, as PyTorch's ignore_index), plus the MoE
// auxiliary load-balancing loss of every MoE block. backward(scale) adds the gradient of
// scale * loss, so gradient accumulation over m micro-batches passes scale = 1/m.
//
// Randomness: dropout masks are keyed by (seed, step, layer, site) and the logical
// position of each element, (global sample index * T + t) * C + c, so a data-parallel
// split or a restart draws the same masks.
//
// Tensor parallel (tensor_parallel.h): a model created with TensorOptions{rank, size, sp}
// holds rank's pieces of every split tensor (table() says which) and computes exactly the
// single-rank model with its group, through the TensorComm set before the first forward.
//
// Expert parallel (expert_parallel.h): a model created with ExpertOptions{rank, size}
// holds only its E/size experts of each MoE block and runs them for the whole ep group,
// through the ExpertComm set before the first forward. Under tp as well, the experts are
// whole on every tp rank and each tp rank routes its own 1/tp of the tokens (moe_tp.cc).
//
// Context parallel (context_parallel.h): a model created with ContextOptions{rank, size}
// holds two chunks of every sequence (T / size rows each), is given whole sequences in its
// micro-batches and picks its rows itself, and runs attention over the cp group through
// the ContextComm set before the first forward.
//
// Pipeline stages (stage.h): a model created with StageOptions holds one stage's blocks and
// the activations of `slots` micro-batches; forward(batch, slot) / backward(slot, ...) run
// one micro-batch through the stage, taking its input from stage_input(slot) (unless it is
// the first stage) and leaving its output in stage_output(slot) (unless it is the last).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/model/context_parallel.h"
#include "engine/model/expert_parallel.h"
#include "engine/model/params.h"
#include "engine/model/sharding.h"
#include "engine/model/stage.h"
#include "engine/model/tensor_parallel.h"
#include "engine/options.h"

namespace partrain::engine::model {

// One micro-batch, host side: inputs/targets [B, T] token ids (whole sequences, also under
// context parallelism).
struct MicroBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
  int B = 0;
  uint64_t first_sample = 0;  // global index of the first sequence (keys dropout)
  int64_t step = 0;           // optimizer step (keys dropout)
  bool train = true;          // false: evaluation (no dropout, routing not counted)
};

struct LossParts {
  float loss = 0;  // ce + aux
  float ce = 0;    // mean cross-entropy
  float aux = 0;   // MoE load-balancing loss (sum over MoE blocks, times the coefficient)
};

// Routing statistics of the forwards since reset_moe_stats() (recompute not counted).
struct MoeStats {
  std::vector<int64_t> tokens;  // kept (token, expert) rows per [MoE block][expert], all E
  int64_t dropped = 0;          // choices dropped beyond capacity, over all MoE blocks
};

struct BlockActs;  // per-block activations (model.cc)
struct MoeState;   // per-MoE-block routing and expert activations (moe.cc)
struct ActSlot;    // one micro-batch's activations, of a pipeline stage's slots

class Model {
 public:
  // Validates the options, allocates parameters, gradients and activations for micro
  // batches of up to `max_batch` sequences, and initialises the weights from `seed`.
  // `shard` (ZeRO, sharding.h) says what this rank keeps only as its shard; sharded state is
  // never allocated full-size. Stages 1-3 need fp32 parameters and gradients.
  static Result<std::unique_ptr<Model>> create(const ModelOptions& options, Backend* backend,
                                               int max_batch, uint64_t seed,
                                               const ShardOptions& shard = {},
                                               const TensorOptions& tp = {},
                                               const ExpertOptions& ep = {},
                                               const StageOptions& stage = {},
                                               const ContextOptions& cp = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Forward pass and loss of one micro-batch (dropout on unless batch.train is false).
  Result<LossParts> forward(const MicroBatch& batch);
  // Accumulates d(scale * loss)/d(params) into grads(), for the last forward().
  // `block_done(l)`, when given, is called as soon as the gradients of
  // block_param_range(l) are final for this backward: first l = L (the final norm and an
  // untied head), then blocks L-1 .. 0; so a data-parallel sync can start while the blocks
  // below are still in backward. The embeddings (and a tied head) finish last.
  void backward(float scale, const std::function<void(int)>& block_done = {});
  // Pipeline stages: the same for the micro-batch in activation slot `slot` (forward(batch)
  // is slot 0). A stage without the head returns only its MoE aux loss and takes the
  // gradient of its output from `dout` ([B*T, C], as stage_output); a stage without the
  // embeddings leaves the gradient of its input in input_grad().
  Result<LossParts> forward(const MicroBatch& batch, int slot);
  void backward(int slot, float scale, const Tensor& dout, BackwardPart part = BackwardPart::kAll);
  // ZB-H1 (StageOptions::split_backward): after backward(slot, ..., kInput), which computed
  // the input gradient (and the norms' and embeddings' gradients), the GEMMs' weight and
  // bias gradients of that micro-batch, from the output gradients it kept.
  void backward_weight(int slot);
  // [max_batch * T, C] (T = seq_len / cp): where a non-first stage's input goes before forward(slot),
  // and a non-last stage's output after it (kept until the slot's next forward).
  Tensor stage_input(int slot);
  Tensor stage_output(int slot);
  // After backward on a non-first stage: d loss / d input ([max_batch * T, C]), valid
  // until the next backward.
  Tensor input_grad() const;
  const StageOptions& stage() const { return stage_; }
  bool first_stage() const { return lo_ == 0; }
  bool last_stage() const { return hi_ == o_.layers; }
  // A tied head on a last stage without the embeddings keeps its own copy of the token
  // embedding (stage.h): the executor sums the two copies' gradients, and the clipping
  // norm and checkpoints count the first stage's.
  bool holds_tied_head_copy() const { return last_stage() && !first_stage() && o_.tie_embeddings; }
  const char* tied_embedding_name() const {
    return o_.arch == Arch::kGpt2 ? "wte.weight" : "model.embed_tokens.weight";
  }
  // [first, end) element offsets in the flat buffers of block l's parameters (l < L), or of
  // the final norm and untied head (l = L): the table adds each block's tensors together,
  // between the embeddings and the final norm.
  std::pair<int64_t, int64_t> block_param_range(int l) const;
  // Zeroes the step's gradient: the flat buffer and/or the shard (stage >= 1).
  void zero_grads();

  // ZeRO (sharding.h). The strategy that moves sharded state; not owned, set before the
  // first forward on stage >= 1.
  void set_shard_comm(ShardComm* comm) { comm_ = comm; }
  ShardComm* shard_comm() const { return comm_; }
  // Tensor parallel: the group's collectives; not owned, set before the first forward
  // when tensor().size > 1.
  void set_tensor_comm(TensorComm* comm);
  TensorComm* tensor_comm() const { return regions_.comm(); }
  const TensorOptions& tensor() const { return tp_; }
  // Expert parallel: the ep group's all-to-all; not owned, set before the first forward
  // when expert().size > 1.
  void set_expert_comm(ExpertComm* comm) { ep_comm_ = comm; }
  ExpertComm* expert_comm() const { return ep_comm_; }
  const ExpertOptions& expert() const { return ep_; }
  // Context parallel: the cp group's K/V exchange; not owned, set before the first forward
  // when context().size > 1 (allocates the scratch blocks it asks for).
  Status set_context_comm(ContextComm* comm);
  ContextComm* context_comm() const { return cp_comm_; }
  const ContextOptions& context() const { return cp_; }
  // Rows this rank holds of each sequence: seq_len / cp.
  int local_seq_len() const { return T_; }
  // MoE routing counts of this rank's forwards since the last reset (the trainer resets
  // them every step); empty tokens for a dense model.
  const MoeStats& moe_stats() const { return moe_stats_; }
  void reset_moe_stats();
  const ShardOptions& shard() const { return shard_; }
  // The shard's ranges with their place in the shard buffers (shard().runs()); unsharded one
  // run, the whole buffer.
  const std::vector<ShardOptions::Run>& shard_runs() const { return shard_runs_; }
  // This rank's fp32 shard of the parameters: stage 3 the shard buffer (the runs one after
  // the other); below stage 3 the shard lives in params() itself, which this returns.
  Tensor shard_params() const;
  // The parameters of one run: a view of params() below stage 3, of the shard buffer at 3.
  Tensor shard_params(const ShardOptions::Run& run) const;
  // The reduced gradient's shard buffer (stage >= 1); unsharded the whole gradient.
  Tensor shard_grads() const;
  // [first, end) of segment s: blocks s < L, the tail s = L, the embeddings s = L + 1.
  std::pair<int64_t, int64_t> segment_range(int s) const;
  int num_segments() const { return o_.layers + 2; }

  const ModelOptions& options() const { return o_; }
  const ParamTable& table() const { return table_; }
  Backend& backend() { return *be_; }
  // Flat, table().total() elements; empty where sharded (params at stage 3, grads >= 2).
  Tensor params() const { return params_; }
  Tensor grads() const { return grads_; }
  Tensor param(int i) const;
  Tensor grad(int i) const;
  int64_t num_params() const { return table_.total(); }

  // Host copies of all parameters (fp32, table layout) and loading them back. Stage 3 keeps
  // only its shard: to_host fills the shard's range (the rest 0), from_host reads it.
  std::vector<float> params_to_host();
  void params_from_host(const std::vector<float>& host);

 private:
  Model() = default;
  Result<Tensor> alloc(MemCategory cat, DType dtype, Shape shape);  // owned, freed in ~Model
  Status alloc_to(MemCategory cat, DType dtype, Shape shape, Tensor* out);  // the same into *out
  Status allocate(int max_batch);
  // One slot's activations into the members (allocate), and swapping a slot with them.
  Status allocate_slot(const BlockActs& shared);
  void swap_slot(ActSlot& s);
  void use_slot(int slot);
  void backward_stage(float scale, const std::function<void(int)>& block_done, const Tensor& dout);
  void head_backward(float scale, const Tensor& dres);
  // A GEMM's backward (weight_grads.cc): whole, or under backward-input the input gradient
  // now and the weight gradient deferred. `site` numbers the GEMMs of the stage.
  void linear_backward(int site, const Tensor& dinp, int w, int b, Shape wshape, Shape bshape,
                       const Tensor& dout, const Tensor& inp, int N, int C, int OC);
  int site(int l, int k) const { return 4 * (l - lo_) + k; }
  Status check_split_backward() const;
  Status allocate_weight_grad_inputs();
  Status alloc_block_acts(BlockActs& a, bool core, bool rest);
  void index_params();
  // Parameter and gradient storage, flat or sharded, and the views per segment (sharding.cc).
  Status allocate_storage();
  // Sharding events of forward/backward (sharding.cc); no-ops unsharded.
  void shard_forward_begin();
  void shard_forward_end();
  void shard_backward_begin();
  void shard_tail_grads_done();
  void shard_block_begin(int l, bool backward);
  void shard_block_end(int l, bool backward);
  void shard_backward_end();
  void gather_block(bool backward, int position);
  // Views: parameter/gradient i seen as `shape` (fused groups span consecutive tensors);
  // an empty tensor for i < 0.
  Tensor pspan(int i, Shape shape) const;
  Tensor gspan(int i, Shape shape) const;
  // The leading N (or B) rows of an activation buffer for the current micro-batch.
  Tensor act(const Tensor& t) const;
  // The leading R rows: the residual stream's rows on this rank (N/size under sp, else N).
  Tensor ract(const Tensor& t) const;
  // Tensor parallel: buffers, the vocabulary-parallel embedding and cross-entropy
  // (vocab_parallel.cc); the sum over the group of a norm's parameter gradients (sp).
  Status tp_allocate(int64_t N, int64_t C);
  void vp_prepare(const MicroBatch& batch);
  void vp_embedding_forward(const Tensor& x0);
  void vp_embedding_backward(const Tensor& demb);
  double vp_loss_forward(const Tensor& logits);
  // rows [R, C] += bias (parameter b; none when b < 0), broadcast over the rows.
  void add_bias_rows(const Tensor& rows, int b);
  void vp_loss_backward(const Tensor& dlogits, const Tensor& dloss);
  // LayerNorm (gpt2) or RMSNorm (llama) with parameters w, b (b < 0: none).
  void norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                    int w, int b);
  void norm_backward(const Tensor& dinp, int w, int b, const Tensor& dout, const Tensor& inp,
                     const Tensor& mean, const Tensor& rstd);
  // res = a + b, then out = norm(res): norm_forward after a residual add, as one backend op.
  void residual_norm_forward(const Tensor& res, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                             const Tensor& a, const Tensor& b, int w, int bias);
  // Blocks (block.cc): out = block(in); backward turns dres = dL/d(out) into dL/d(in) in place.
  void block_forward(int l, const Tensor& in, const Tensor& out, BlockActs& a);
  void block_backward(int l, const Tensor& in, const Tensor& dres, BlockActs& a);
  void attention_core_forward(BlockActs& a);
  // Context parallel (context_attention.cc): the attention core over the cp group, its
  // backward into dqkv; this rank's rows of a micro-batch (host copies); the learned
  // positions' rows and gradient at the global positions; every run of rows [row0, row0 +
  // rows) whose logical positions are consecutive, as f(row, count, logical row).
  Status cp_allocate(int64_t N);
  void cp_attention_forward(BlockActs& a);
  void cp_attention_backward(BlockActs& a, const Tensor& dqkv, const Tensor& datt);
  MicroBatch local_rows(const MicroBatch& batch);
  void positions_forward(const Tensor& x0);
  void positions_backward(const Tensor& dx);
  void for_each_logical_run(int row0, int rows, const std::function<void(int, int, uint64_t)>& f) const;
  // x: the MLP's [N, C] input; out: its (partial, under tp) [N, C] output.
  void mlp_forward(int l, BlockActs& a, const Tensor& x, const Tensor& out);
  void mlp_backward(int l, BlockActs& a, const Tensor& x, const Tensor& dout, const Tensor& dx);
  // MoE feed-forward (moe.cc).
  Status moe_allocate(int l, MoeState& s);
  // The routing of the micro-batch (all cp ranks' rows under cp, gathered over tp first
  // under tp) from this rank's router logits [N, E] (N_, or N_/tp under tp): this rank's
  // choices, slots, counts; the aux loss and routing statistics. moe_admit gives choice cj
  // of row n a packed slot, or drops it.
  void moe_route(int l, MoeState& s, const Tensor& logits);
  static void moe_admit(MoeState& s, size_t cj, int n, bool kept);
  void moe_forward(int l, MoeState& s, const Tensor& x, const Tensor& out);
  void moe_backward(int l, MoeState& s, const Tensor& x, const Tensor& dout, const Tensor& dx);
  void moe_experts_backward(int l, MoeState& s, const Tensor& dout, const Tensor& dx);
  // Local expert j's MLP on rows [r0, r0 + M) of s.xin (h, act, y the same rows); backward
  // turns dy [M, C] into dxin [M, C] and accumulates the expert's gradients.
  void expert_forward(int l, int j, MoeState& s, int64_t r0, int M);
  void expert_backward(int l, int j, MoeState& s, int64_t r0, int M, const Tensor& dy, const Tensor& dxin);
  void moe_router_backward(int l, MoeState& s, const Tensor& x, const Tensor& dx);
  // Under tensor parallelism (moe_tp.cc): each tp rank routes its own tokens. Forward takes
  // the norm's rows this rank holds and leaves the branch's; backward returns d ln2 (this
  // rank's rows under sp, all N without), in dx's memory. The exchange of the choice
  // counts sets s.admitted_before and the micro-batch's totals (a no-op without tp).
  Status moe_tp_allocate();
  void moe_exchange_choices(MoeState& s);
  void moe_tp_forward(int l, MoeState& s, const Tensor& ln2, const Tensor& branch);
  Tensor moe_tp_backward(int l, MoeState& s, const Tensor& ln2, const Tensor& dbranch, const Tensor& dx);
  // Expert parallel (expert_parallel.cc): dispatch, the local experts, combine; backward
  // also leaves the combine weights' gradients in s.host_dgate.
  void moe_ep_forward(int l, MoeState& s, const Tensor& x, const Tensor& out);
  void moe_ep_backward(int l, MoeState& s, const Tensor& dout, const Tensor& dx);
  int moe_index(int l) const;  // position of MoE block l among the MoE blocks
  // Dropout at (layer, site) in place; dropout_grad returns dL/d(input) (dout itself when
  // dropout is off, else a scratch buffer).
  uint64_t dropout_key(int layer, int site) const;
  void dropout(const Tensor& t, int layer, int site);
  Tensor dropout_grad(const Tensor& dout, int layer, int site);

  ModelOptions o_;
  ParamTable table_;
  Backend* be_ = nullptr;
  uint64_t seed_ = 0;
  std::vector<Tensor> owned_;
  Tensor params_, grads_;

  // Storage per segment: param(i) is pseg_[seg_of_[i]] at offset - seg_lo_[seg]; unsharded
  // these are views of params_/grads_, sharded they are slots (sharding.h).
  ShardOptions shard_;
  std::vector<ShardOptions::Run> shard_runs_;
  ShardComm* comm_ = nullptr;
  std::vector<int> seg_of_;
  std::vector<int64_t> seg_lo_;
  std::vector<Tensor> pseg_, gseg_;
  Tensor shard_params_, shard_grads_;
  std::vector<Tensor> pslots_, gslots_;  // stage 3 block parameters, stage 2 block gradients
  std::vector<int> gslot_owner_;         // block whose gradient a gradient slot holds, or -1
  std::vector<bool> pslot_pending_;      // a gather into the parameter slot is not waited for
  bool backward_gathered_ = false;       // the last forward prefetched backward's first blocks
  Tensor pedge_tail_, pedge_emb_, gedge_tail_, gedge_emb_;  // the tail's and embeddings' slots

  // Tensor parallel: options, regions, local widths (heads, kv heads, q width, fused qkv
  // width, ffn width, fused fc width, vocabulary rows and the first of them).
  TensorOptions tp_;
  Regions regions_;
  int lh_ = 0, lkv_ = 0, lq_ = 0, lqkv_ = 0, lf_ = 0, lfc_ = 0, lv_ = 0;
  int64_t v0_ = 0;
  Tensor gathered_, partial_, dfull_, drows_;  // [N, C] x3, [N/size, C]: region buffers
  Tensor tok_local_, tok_mask_, iota_, pos_;   // vocabulary-parallel lookup, [N]
  Tensor zeros_;                               // I32 [N] of 0: a bias broadcast over rows
  Tensor ce_targets_, fix_idx_, fix_w_;        // vocabulary-parallel loss, [N]
  Tensor vp_stats_;                            // F32 [2N]: the loss's row statistics, reduced over tp
  Tensor norm_scratch_;                        // [2C]: one norm's gradients before the sum
  Tensor moe_rows_;                            // [N/size, C]: a MoE block's rows without sp
  std::vector<float> host_f_;
  std::vector<int32_t> host_i_;
  // Context parallel: options, the group's exchange, this rank's rows per sequence and
  // their positions, the packed K/V block and its gradient [N, 2 KV hd], the exchange's
  // scratch, the position of every row (learned positions), host copies of this rank's
  // tokens and targets.
  ContextOptions cp_;
  ContextComm* cp_comm_ = nullptr;
  int T_ = 0;
  SeqPositions chunk_pos_;
  Tensor kv_, dkv_, cp_scratch_, cp_pos_;
  std::vector<int32_t> cp_inputs_, cp_targets_;
  // Expert parallel.
  ExpertOptions ep_;
  ExpertComm* ep_comm_ = nullptr;
  MoeStats moe_stats_;
  int tp_row0() const { return tp_.sp ? tp_.rank * R_ : 0; }  // first residual row held

  // Pipeline stage: blocks [lo_, hi_); the slots not in use (the one in use lives in the
  // members below, swapped in by use_slot).
  StageOptions stage_;
  int lo_ = 0, hi_ = 0;
  std::vector<std::unique_ptr<ActSlot>> slots_;
  int slot_ = -1;
  BackwardPart part_ = BackwardPart::kAll;
  std::vector<Tensor> wgrad_dout_;
  std::vector<Tensor> wgrad_inp_;  // empty unless GEMM inputs live in shared buffers (recompute, tp)
  std::vector<DeferredGrad> deferred_;

  // Current micro-batch.
  int B_ = 0, N_ = 0, R_ = 0, max_batch_ = 0;
  MicroBatch batch_;
  float aux_loss_ = 0;
  int loss_count_ = 0;  // tokens with a target (>= 0) in the current micro-batch
  float backward_scale_ = 1;
  bool recomputing_ = false;  // full recompute re-runs block_forward inside backward

  // Parameter indices per block (first tensor of each fused group).
  struct BlockParams {
    int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, o_w = -1, o_b = -1;
    int ln2_w = -1, ln2_b = -1, fc_w = -1, fc_b = -1, proj_w = -1, proj_b = -1;
    int router = -1;
    std::vector<int> expert_fc_w, expert_fc_b, expert_proj_w, expert_proj_b;
  };
  std::vector<BlockParams> bp_;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1, head_ = -1;

  // Activations, allocated for max_batch sequences.
  Tensor tokens_, targets_;                       // I32 [N]
  std::vector<Tensor> res_;                       // [L+1] residual stream [N, C]
  std::vector<std::unique_ptr<BlockActs>> acts_;  // per block (views shared under recompute)
  std::vector<std::unique_ptr<MoeState>> moe_;    // per block, null for dense blocks
  Tensor lnf_, lnf_mean_, lnf_rstd_, logits_, losses_, lse_;
  Tensor res_scratch_;                            // full recompute's block output
  // Backward scratch, shared by all blocks.
  Tensor dloss_, dlogits_, dres_, dln_, dbranch_, datt_, dqkv_, dfc_, dact_;
  std::vector<float> host_losses_;
};

}  // namespace partrain::engine::model
