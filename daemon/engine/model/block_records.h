// The tensors one transformer block keeps for its backward, per micro-batch: the one list
// the engine allocates from (Model::alloc_block_acts) and the planner sizes memory by
// (planner/memory.cc stage_memory), so the two cannot drift. Standard library only, so the
// planner, which links no engine code, includes it.
//
// Each record has a group: kCore (the attention core's output and log-sum-exp: what
// selective recompute frees, rebuilt from the block's inputs) or kRest (the norms, the
// attention input, the MLP's; full recompute frees these too and keeps only the block
// input); a dtype (the activations' or fp32); and a shape from the rank's dimensions:
// tokens N = b T of the micro-batch (b T / cp under context parallelism), residual rows NR
// (N / tp under sequence parallelism, else N), the rank's query width Q = H hd / tp, fused
// q/k/v width QKV / tp, MLP widths FC / tp and F / tp, heads H / tp.
//
// Worked example: gpt2 C 768, H 12, b 8, T 1024, tp 1, bf16: kCore is att [8192 x 768]
// bf16 (12 MiB) + lse [8 x 12 x 1024] fp32 (0.375 MiB); kRest is ln1, res2, ln2 [8192 x 768]
// bf16 (36 MiB), four [8192] fp32 norm statistics (0.125 MiB), qkv [8192 x 2304], fc and
// act [8192 x 3072] bf16 (132 MiB).
#pragma once

#include <cstddef>

namespace partrain::engine::model {

enum class RecordGroup { kCore, kRest };
enum class RecordType { kActivation, kF32 };
// Rows and columns of a record, as a shape: {rows, cols}, or {b, heads, T} for kBatchHeads.
enum class RecordRows { kTokens, kResidualRows, kBatchHeads };
enum class RecordCols { kHidden, kQuery, kQkv, kFc, kFfn, kSeq, kNone };

struct BlockRecord {
  const char* name;
  RecordGroup group;
  RecordType type;
  RecordRows rows;
  RecordCols cols;
};

// In the order the engine allocates them (model.cc kRecordMembers follows it).
inline constexpr BlockRecord kBlockRecords[] = {
    {"att", RecordGroup::kCore, RecordType::kActivation, RecordRows::kTokens, RecordCols::kQuery},
    {"lse", RecordGroup::kCore, RecordType::kF32, RecordRows::kBatchHeads, RecordCols::kSeq},
    {"ln1", RecordGroup::kRest, RecordType::kActivation, RecordRows::kResidualRows, RecordCols::kHidden},
    {"ln1_mean", RecordGroup::kRest, RecordType::kF32, RecordRows::kResidualRows, RecordCols::kNone},
    {"ln1_rstd", RecordGroup::kRest, RecordType::kF32, RecordRows::kResidualRows, RecordCols::kNone},
    {"qkv", RecordGroup::kRest, RecordType::kActivation, RecordRows::kTokens, RecordCols::kQkv},
    {"res2", RecordGroup::kRest, RecordType::kActivation, RecordRows::kResidualRows, RecordCols::kHidden},
    {"ln2", RecordGroup::kRest, RecordType::kActivation, RecordRows::kResidualRows, RecordCols::kHidden},
    {"ln2_mean", RecordGroup::kRest, RecordType::kF32, RecordRows::kResidualRows, RecordCols::kNone},
    {"ln2_rstd", RecordGroup::kRest, RecordType::kF32, RecordRows::kResidualRows, RecordCols::kNone},
    {"fc", RecordGroup::kRest, RecordType::kActivation, RecordRows::kTokens, RecordCols::kFc},
    {"act", RecordGroup::kRest, RecordType::kActivation, RecordRows::kTokens, RecordCols::kFfn},
};
inline constexpr size_t kNumBlockRecords = sizeof(kBlockRecords) / sizeof(kBlockRecords[0]);

// The rank's dimensions a record's shape is made of (doubles: the planner's arithmetic).
struct RecordDims {
  double batch = 0;           // sequences in the micro-batch
  double seq = 0;             // tokens per sequence on the rank (T / cp)
  double residual_rows = 0;   // NR
  double heads = 0;           // H / tp
  double hidden = 0, query = 0, qkv = 0, fc = 0, ffn = 0;  // C, Q, QKV, FC, F on the rank
  double tokens() const { return batch * seq; }
};

// Rows (or, for kBatchHeads, batch x heads) and columns (1 for kNone) of a record.
inline double record_rows(const BlockRecord& r, const RecordDims& d) {
  switch (r.rows) {
    case RecordRows::kTokens: return d.tokens();
    case RecordRows::kResidualRows: return d.residual_rows;
    case RecordRows::kBatchHeads: return d.batch * d.heads;
  }
  return 0;
}
inline double record_cols(const BlockRecord& r, const RecordDims& d) {
  switch (r.cols) {
    case RecordCols::kHidden: return d.hidden;
    case RecordCols::kQuery: return d.query;
    case RecordCols::kQkv: return d.qkv;
    case RecordCols::kFc: return d.fc;
    case RecordCols::kFfn: return d.ffn;
    case RecordCols::kSeq: return d.seq;
    case RecordCols::kNone: return 1;
  }
  return 0;
}

// Bytes of the records of `group` for one block and micro-batch.
inline double record_group_bytes(RecordGroup group, const RecordDims& d, double activation_bytes) {
  double bytes = 0;
  for (const BlockRecord& r : kBlockRecords) {
    if (r.group != group) continue;
    bytes += record_rows(r, d) * record_cols(r, d) * (r.type == RecordType::kF32 ? 4 : activation_bytes);
  }
  return bytes;
}

}  // namespace partrain::engine::model
