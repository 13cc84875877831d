// What a checkpoint is, independent of where it is kept: the pieces of logical tensors
// each rank wrote and the training state of the step. RocksDB (state_store.h) keeps these
// records; the rendezvous store carries them from the workers to the coordinator; both as
// the text encode_*() writes.
//
// Tensors are addressed by their logical (Hugging Face) name and a flat element range
// [begin, end) of the whole tensor in row-major order, never by rank: a rank states "I
// hold these ranges of these tensors' weights / Adam moments", and any later layout reads
// back the ranges it needs from whichever pieces overlap them. Plain dp: dp rank r writes
// the r-th 1/dp slice of every tensor; ZeRO ranks write the ranges they own; a tp/pp
// layout writes its shards the same way.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace partrain::store {

// Which state of a parameter a piece holds.
enum class Role : uint8_t { kWeight, kAdamM, kAdamV };
const char* role_name(Role role);  // "weight", "adam_m", "adam_v"
bool parse_role(std::string_view text, Role* out);
inline constexpr Role kAllRoles[] = {Role::kWeight, Role::kAdamM, Role::kAdamV};

// A logical tensor: its name and global shape (row-major).
struct LogicalTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// "This rank owns elements [begin, end) of `role` of tensor `tensor`".
struct PieceSpec {
  std::string tensor;
  std::vector<int64_t> shape;  // the tensor's global shape
  Role role = Role::kWeight;
  int64_t begin = 0, end = 0;  // flat element range of the whole tensor, row-major
};

// A piece as written: where its bytes are and their checksum.
struct PieceRecord {
  PieceSpec spec;
  std::string dtype = "F32";  // element type on disk (safetensors' names)
  std::string file;           // relative to the checkpoint root, e.g. step-000000000008/rank-00001.bin
  uint64_t offset = 0;        // byte offset in the file
  uint64_t bytes = 0;         // (end - begin) * dtype size
  uint32_t crc32c = 0;        // of those bytes
};

// The training state of a committed step. Dropout and init are counter-based (Philox keyed
// by seed, step and logical position) and data order is a function of the global sample
// index, so (seed, step, consumed_samples) are the whole random and data state.
struct TrainState {
  int64_t step = 0;               // optimizer steps done
  uint64_t consumed_samples = 0;  // global sample index the next step starts at
  uint64_t epoch = 0;             // consumed_samples / windows in the data
  uint64_t seed = 0;              // [training] seed: keys init, dropout and the data order
  int64_t adam_steps = 0;         // AdamW's step count t (bias correction)
  int64_t lr_step = 0;            // position in the learning-rate schedule
  double loss_scale = 1.0;        // 1 on fp32
  int64_t tokens = 0;             // tokens trained on
  std::string layout;             // the layout that wrote it, e.g. "dp2", for messages
  int world = 1;                  // ranks that wrote pieces
  // The learning-rate schedule's length the run started with ([training] decay_steps,
  // default its first start's steps): a resumed run keeps it whatever --steps says. 0 in
  // checkpoints written before it was kept (the resumed run's own then holds).
  int64_t decay_steps = 0;
};

struct Checkpoint {
  TrainState state;
  std::vector<PieceRecord> pieces;
  uint64_t total_bytes() const;
};

// Text encodings (one record per line, tab-separated; names never hold tabs or newlines).
std::string encode_pieces(const std::vector<PieceRecord>& pieces);
Result<std::vector<PieceRecord>> decode_pieces(std::string_view text);
std::string encode_state(const TrainState& s);
Result<TrainState> decode_state(std::string_view text);
std::string encode_checkpoint(const Checkpoint& c);  // state line + piece lines
Result<Checkpoint> decode_checkpoint(std::string_view text);

// Checks that for every tensor of `tensors` and every role the pieces cover [0, numel)
// exactly once, with the right shape and byte size: a checkpoint that lacks any element
// must not be committed. The message names the first gap or overlap.
Status check_complete(const std::vector<PieceRecord>& pieces,
                      const std::vector<LogicalTensor>& tensors);

// The pieces dp rank `dp_rank` of `dp` writes: the dp_rank-th 1/dp slice of every role of
// every tensor, [numel * r / dp, numel * (r + 1) / dp) (empty slices left out).
std::vector<PieceSpec> dp_slice_pieces(const std::vector<LogicalTensor>& tensors, int dp,
                                       int dp_rank);

}  // namespace partrain::store
