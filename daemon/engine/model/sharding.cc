// Parameter and gradient storage, flat or sharded (ZeRO, sharding.h): the views per
// segment, the slots, and what forward and backward ask of the ShardComm.
#include <algorithm>

#include <fmt/format.h>

#include "engine/model/model.h"

namespace partrain::engine::model {

int64_t ShardOptions::numel() const {
  int64_t n = 0;
  for (const FlatRange& r : ranges) n += r.numel();
  return n;
}

std::vector<ShardOptions::Run> ShardOptions::runs() const {
  std::vector<Run> out;
  int64_t at = 0;
  for (const FlatRange& r : ranges) {
    out.push_back({r.begin, r.end, at});
    at += r.numel();
  }
  return out;
}

std::vector<ShardPiece> shard_pieces(const ParamTable& table, int64_t begin, int64_t end) {
  std::vector<ShardPiece> out;
  for (const ParamSpec& p : table.specs()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
    if (lo >= hi) continue;
    if (!p.split()) {
      out.push_back(ShardPiece{p.name, p.shape, lo - p.offset, hi - p.offset, lo});
      continue;
    }
    // A tensor-parallel piece: its local elements are runs of the logical tensor.
    int64_t local = p.offset;
    for (const ParamSpec::Piece& piece : p.pieces) {
      const int64_t a = std::max(lo, local), b = std::min(hi, local + piece.count);
      if (a < b) {
        out.push_back(ShardPiece{p.name, p.logical, piece.begin + (a - local),
                                 piece.begin + (b - local), a});
      }
      local += piece.count;
    }
  }
  return out;
}

Status Model::allocate_storage() {
  const int L = o_.layers, S = num_segments();
  const int64_t n = table_.total();
  const int stage = shard_.stage;
  if (stage < 0 || stage > 3) return Status::invalid(fmt::format("ZeRO stage {}: use 0 to 3", stage));
  if (stage > 0) {
    if (be_->param_dtype() != DType::kF32 || be_->grad_dtype() != DType::kF32) {
      return Status::invalid(fmt::format(
          "ZeRO stage {} needs fp32 parameters and gradients (CPU ranks); the {} backend keeps "
          "lower precision; use plain dp on it", stage, be_->name()));
    }
    std::vector<FlatRange> sorted = shard_.ranges;
    std::sort(sorted.begin(), sorted.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
    for (size_t i = 0; i < sorted.size(); ++i) {
      const FlatRange& r = sorted[i];
      if (r.begin < 0 || r.begin > r.end || r.end > n || (i > 0 && r.begin < sorted[i - 1].end)) {
        return Status::invalid(fmt::format("ZeRO shard range [{}, {}) is not inside the {} parameters, or "
                                           "overlaps another", r.begin, r.end, n));
      }
    }
    if (shard_.prefetch < 0) return Status::invalid("ZeRO-3 prefetch must be 0 or more");
  }
  // Segment of every tensor, and where each segment starts.
  seg_lo_.assign(static_cast<size_t>(S), 0);
  std::vector<int64_t> len(static_cast<size_t>(S), 0);
  int64_t max_block = 0;
  for (int s = 0; s < S; ++s) {
    const auto [lo, hi] = segment_range(s);
    seg_lo_[static_cast<size_t>(s)] = lo;
    len[static_cast<size_t>(s)] = hi - lo;
    if (s < L) max_block = std::max(max_block, hi - lo);
  }
  seg_of_.clear();
  for (const ParamSpec& p : table_.specs()) {
    int seg = L + 1;
    for (int s = 0; s < S; ++s) {
      const auto [lo, hi] = segment_range(s);
      if (p.offset >= lo && p.offset < hi) seg = s;
    }
    seg_of_.push_back(seg);
  }
  using MC = MemCategory;
  auto get = [&](MC c, DType d, int64_t numel, Tensor* out) -> Status {
    Result<Tensor> t = alloc(c, d, {std::max<int64_t>(numel, 1)});
    if (!t) return t.status();
    *out = *t;
    return Status::ok();
  };
  const DType pd = be_->param_dtype(), gd = be_->grad_dtype();
  const int64_t shard_n = shard_.numel();
  shard_runs_ = stage > 0 ? shard_.runs() : std::vector<ShardOptions::Run>{{0, n, 0}};
  pseg_.assign(static_cast<size_t>(S), Tensor{});
  gseg_.assign(static_cast<size_t>(S), Tensor{});
  // Parameters: flat below stage 3; else the shard, the edges and prefetch + 1 block slots.
  if (stage < 3) {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWeights, pd, n, &params_));
    for (int s = 0; s < S; ++s) {
      pseg_[static_cast<size_t>(s)] = params_.slice(seg_lo_[static_cast<size_t>(s)], {len[static_cast<size_t>(s)]});
    }
  } else {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWeights, DType::kF32, shard_n, &shard_params_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWeights, pd, len[static_cast<size_t>(L)], &pedge_tail_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kWeights, pd, len[static_cast<size_t>(L + 1)], &pedge_emb_));
    pslots_.assign(static_cast<size_t>(std::max(1, std::min(shard_.prefetch + 1, hi_ - lo_))), Tensor{});
    for (Tensor& t : pslots_) PARTRAIN_RETURN_IF_ERROR(get(MC::kWeights, pd, max_block, &t));
    pslot_pending_.assign(pslots_.size(), false);
    pseg_[static_cast<size_t>(L)] = pedge_tail_.slice(0, {len[static_cast<size_t>(L)]});
    pseg_[static_cast<size_t>(L + 1)] = pedge_emb_.slice(0, {len[static_cast<size_t>(L + 1)]});
    for (int l = 0; l < L; ++l) pseg_[static_cast<size_t>(l)] = pslots_[0].slice(0, {len[static_cast<size_t>(l)]});
  }
  // Gradients: flat below stage 2 (plus the reduced shard at stage 1); else the shard, the
  // edges and two block slots.
  if (stage >= 1) PARTRAIN_RETURN_IF_ERROR(get(MC::kGrads, DType::kF32, shard_n, &shard_grads_));
  if (stage < 2) {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kGrads, gd, n, &grads_));
    for (int s = 0; s < S; ++s) {
      gseg_[static_cast<size_t>(s)] = grads_.slice(seg_lo_[static_cast<size_t>(s)], {len[static_cast<size_t>(s)]});
    }
  } else {
    PARTRAIN_RETURN_IF_ERROR(get(MC::kGrads, gd, len[static_cast<size_t>(L)], &gedge_tail_));
    PARTRAIN_RETURN_IF_ERROR(get(MC::kGrads, gd, len[static_cast<size_t>(L + 1)], &gedge_emb_));
    gslots_.assign(static_cast<size_t>(std::max(1, std::min(2, hi_ - lo_))), Tensor{});
    for (Tensor& t : gslots_) PARTRAIN_RETURN_IF_ERROR(get(MC::kGrads, gd, max_block, &t));
    gslot_owner_.assign(gslots_.size(), -1);
    gseg_[static_cast<size_t>(L)] = gedge_tail_.slice(0, {len[static_cast<size_t>(L)]});
    gseg_[static_cast<size_t>(L + 1)] = gedge_emb_.slice(0, {len[static_cast<size_t>(L + 1)]});
    for (int l = 0; l < L; ++l) gseg_[static_cast<size_t>(l)] = gslots_[0].slice(0, {len[static_cast<size_t>(l)]});
  }
  return Status::ok();
}

Tensor Model::shard_params() const {
  if (shard_.stage == 3) return shard_params_.slice(0, {shard_.numel()});
  return params_;
}

Tensor Model::shard_params(const ShardOptions::Run& r) const {
  if (shard_.stage == 3) return shard_params_.slice(r.at, {r.end - r.begin});
  return params_.slice(r.begin, {r.end - r.begin});
}

Tensor Model::shard_grads() const {
  if (shard_.stage == 0) return grads_;
  return shard_grads_.slice(0, {shard_.numel()});
}

void Model::zero_grads() {
  if (shard_.stage < 2) be_->zero(grads_);
  if (shard_.stage >= 1) be_->zero(shard_grads_);
}

std::vector<float> Model::params_to_host() {
  std::vector<float> host(static_cast<size_t>(table_.total()));
  if (shard_.stage == 3) {
    for (const ShardOptions::Run& r : shard_runs_) be_->to_host(host.data() + r.begin, shard_params(r));
  } else {
    be_->to_host(host.data(), params_);
  }
  return host;
}

void Model::params_from_host(const std::vector<float>& host) {
  if (shard_.stage == 3) {
    for (const ShardOptions::Run& r : shard_runs_) be_->to_device(shard_params(r), host.data() + r.begin);
  } else {
    be_->to_device(params_, host.data());
  }
}

// ---- ZeRO-3: parameters gathered per segment ------------------------------------------------

// Block at `position` of a pass over this model's blocks (forward lo..hi-1, backward
// hi-1..lo; a pipeline stage holds [lo, hi)) into slot position % slots.
void Model::gather_block(bool backward, int position) {
  if (position >= hi_ - lo_ || comm_ == nullptr) return;
  const int l = backward ? hi_ - 1 - position : lo_ + position;
  const size_t k = static_cast<size_t>(position) % pslots_.size();
  const auto [lo, hi] = segment_range(l);
  pseg_[static_cast<size_t>(l)] = pslots_[k].slice(0, {hi - lo});
  comm_->gather_params(shard_params(), pseg_[static_cast<size_t>(l)], lo);
  pslot_pending_[k] = true;
}

void Model::shard_forward_begin() {
  if (shard_.stage < 3 || comm_ == nullptr) return;
  const int L = o_.layers;
  // A forward without backward leaves backward's prefetches in flight: finish them.
  for (size_t k = 0; k < pslots_.size(); ++k) {
    if (pslot_pending_[k]) comm_->wait_params(pslots_[k]);
    pslot_pending_[k] = false;
  }
  backward_gathered_ = false;
  // The embeddings and the tail stay for the micro-batch (a tied head reads wte at both ends).
  const Tensor emb = pseg_[static_cast<size_t>(L + 1)], tail = pseg_[static_cast<size_t>(L)];
  comm_->gather_params(shard_params(), emb, segment_range(L + 1).first);
  comm_->gather_params(shard_params(), tail, segment_range(L).first);
  for (int i = 0; i < static_cast<int>(pslots_.size()); ++i) gather_block(false, i);
  comm_->wait_params(emb);
  comm_->wait_params(tail);
}

void Model::shard_forward_end() {
  if (shard_.stage < 3 || comm_ == nullptr) return;
  // Backward's first blocks, under the loss and the head's backward.
  for (int i = 0; i < static_cast<int>(pslots_.size()); ++i) gather_block(true, i);
  backward_gathered_ = true;
}

void Model::shard_block_begin(int l, bool backward) {
  const int position = backward ? hi_ - 1 - l : l - lo_;
  if (shard_.stage == 3 && comm_ != nullptr) {
    const size_t k = static_cast<size_t>(position) % pslots_.size();
    comm_->wait_params(pseg_[static_cast<size_t>(l)]);
    pslot_pending_[k] = false;
  }
  if (shard_.stage >= 2 && backward) {
    // This block's gradient slot: wait for the reduction of the block that used it last.
    const size_t k = static_cast<size_t>(position) % gslots_.size();
    const int owner = gslot_owner_[k];
    if (owner >= 0 && comm_ != nullptr) {
      const auto [lo, hi] = segment_range(owner);
      comm_->release_grads(lo, hi - lo);
    }
    const auto [lo, hi] = segment_range(l);
    gseg_[static_cast<size_t>(l)] = gslots_[k].slice(0, {hi - lo});
    be_->zero(gseg_[static_cast<size_t>(l)]);
    gslot_owner_[k] = l;
  }
}

void Model::shard_block_end(int l, bool backward) {
  const int position = backward ? hi_ - 1 - l : l - lo_;
  // The slot is free: the block a prefetch depth ahead goes into it.
  if (shard_.stage == 3) gather_block(backward, position + static_cast<int>(pslots_.size()));
  if (shard_.stage >= 2 && backward && comm_ != nullptr) {
    comm_->reduce_grads(gseg_[static_cast<size_t>(l)], segment_range(l).first, shard_grads());
  }
}

// ---- ZeRO-2: gradients reduced per segment as backward finishes it ------------------------

void Model::shard_backward_begin() {
  if (shard_.stage < 2) return;
  const int L = o_.layers;
  // ZeRO-3: backward's first blocks, unless the forward just before prefetched them (on a
  // pipeline stage another micro-batch's forward may have run in between and taken the
  // slots; the parameters are the same for every micro-batch of the step).
  if (shard_.stage == 3 && comm_ != nullptr && !backward_gathered_) {
    for (size_t k = 0; k < pslots_.size(); ++k) {
      if (pslot_pending_[k]) comm_->wait_params(pslots_[k]);
      pslot_pending_[k] = false;
    }
    for (int i = 0; i < static_cast<int>(pslots_.size()); ++i) gather_block(true, i);
  }
  backward_gathered_ = false;
  // The previous micro-batch's tail and embedding reductions read these slots.
  for (int s : {L, L + 1}) {
    const auto [lo, hi] = segment_range(s);
    if (comm_ != nullptr) comm_->release_grads(lo, hi - lo);
    be_->zero(gseg_[static_cast<size_t>(s)]);
  }
}

void Model::shard_tail_grads_done() {
  if (shard_.stage < 2 || comm_ == nullptr) return;
  const int L = o_.layers;
  comm_->reduce_grads(gseg_[static_cast<size_t>(L)], segment_range(L).first, shard_grads());
}

void Model::shard_backward_end() {
  if (shard_.stage < 2 || comm_ == nullptr) return;
  const int L = o_.layers;
  comm_->reduce_grads(gseg_[static_cast<size_t>(L + 1)], segment_range(L + 1).first, shard_grads());
}

}  // namespace partrain::engine::model
