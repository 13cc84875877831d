// Tensor shard files: one file per rank per checkpoint, the rank's pieces back to back,
// under the checkpoint root:
//
//   ROOT/state.db/                      the RocksDB state store (state_store.h)
//   ROOT/step-000000000008/rank-00001.bin
//
// A shard is written under a temp name, fsynced, renamed into place and the folder
// fsynced (engine/io/atomic_file.h), and each piece's CRC-32C is recorded, before the rank
// tells the coordinator it is durable. Files hold raw little-endian F32; all metadata is
// in the manifest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/manifest.h"

namespace partrain::store {

// The checkpoint root of a run: [checkpoint] dir, or <run_dir>/checkpoints when empty.
std::string checkpoint_root(const std::string& dir, const std::string& run_dir);

// "step-000000000008": the folder of step 8's shards.
std::string step_folder(int64_t step);
// The step of a folder name made by step_folder, or -1.
int64_t parse_step_folder(const std::string& name);

// The steps of every step folder under ROOT, ascending (none when ROOT does not exist).
Result<std::vector<int64_t>> list_step_folders(const std::string& root);
// Deletes the temp files (".tmp.") a dead write left in ROOT/step-N; returns their paths.
Result<std::vector<std::string>> remove_temp_files(const std::string& root, int64_t step);
// Deletes ROOT/step-N: its manifest first (durably), then the rest, so a crash half way
// never leaves a folder that claims to be a whole committed checkpoint.
Status remove_step(const std::string& root, int64_t step);

// One piece to write: what it is and its elements (spec.end - spec.begin floats).
struct PieceData {
  PieceSpec spec;
  const float* data = nullptr;
};

// Writes `pieces` as ROOT/step-N/rank-R.bin (creating the folder, durably) and returns
// their records. io_error naming the file when the disk refuses (ENOSPC and so on); no
// partial file is left under the final name.
Result<std::vector<PieceRecord>> write_shard(const std::string& root, int64_t step, int rank,
                                             const std::vector<PieceData>& pieces);

// Reads one piece and checks its size and checksum: corruption naming the file, the
// offset, the expected and the actual CRC-32C (or the bytes missing when truncated).
Result<std::vector<float>> read_piece(const std::string& root, const PieceRecord& piece);
// The same without keeping the data.
Status verify_piece(const std::string& root, const PieceRecord& piece);
// Every piece of `c`; the first failure.
Status verify_checkpoint(const std::string& root, const Checkpoint& c);

// Copies elements [begin, end) of `role` of `tensor` from the checkpoint into dst
// (end - begin floats), from whichever pieces overlap it; each piece read is verified.
// invalid when some element is in no piece.
Status read_range(const std::string& root, const Checkpoint& c, const std::string& tensor, Role role,
                  int64_t begin, int64_t end, float* dst);

}  // namespace partrain::store
