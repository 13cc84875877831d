// A committed checkpoint's record kept a second time, in its own folder: ROOT/step-N/manifest,
// written (atomically) right after the state store's commit and before the ranks hear that
// it committed. The state store stays the authority on what exists; this copy is how the
// coordinator recognises a checkpoint the store lost track of (a damaged or cut RocksDB
// WAL rolls commits back, a deleted state.db forgets them all) so that it is taken back
// instead of deleted: a step folder whose manifest is intact and whose shards all verify
// was committed once, and is never destroyed for being missing from the store.
//
// The file is text, four parts, the last line a CRC-32C of everything before it:
//
//   partrain-checkpoint 1
//   config_hash crc32c:6c1d0a9e
//   state\tstep=8\t...              encode_checkpoint(): one state line, one line per piece
//   piece\t...
//   crc32c 1a2b3c4d
//
// Worked example: a checkpoint of step 8 under ROOT=/runs/a/checkpoints is recorded in
// /runs/a/checkpoints/step-000000000008/manifest; flip any byte of that file and
// read_folder_manifest() says "checksum mismatch" rather than trusting it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "store/manifest.h"

namespace partrain::store {

inline constexpr const char* kFolderManifestName = "manifest";

struct FolderManifest {
  std::string config_hash;  // the run's (state_store.h config_hash())
  Checkpoint checkpoint;
};

// The file's text, and its parser: corruption naming `path` when the header, the CRC-32C
// line or the checkpoint record is wrong.
std::string encode_folder_manifest(const FolderManifest& m);
Result<FolderManifest> decode_folder_manifest(std::string_view text, const std::string& path);

// Writes ROOT/step-N/manifest for `m.checkpoint` (N = its step), durably (temp, fsync,
// rename, fsync the folder).
Status write_folder_manifest(const std::string& root, const FolderManifest& m);

// Reads ROOT/step-N/manifest: not_found when the folder has none (a save that never
// committed, or a checkpoint written before partrain kept this copy), corruption when it is
// damaged, the manifest otherwise.
Result<FolderManifest> read_folder_manifest(const std::string& root, int64_t step);

}  // namespace partrain::store
