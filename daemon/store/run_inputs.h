// What a run's numbers depend on beyond its tensors' names and shapes (the config hash,
// state_store.h), as "key=value" lines, so a resume compares them one by one and names the
// key that changed (coordinator.h; issue 31, item 22). The lines, in this order:
//
//   model.<key>             every [model] key that changes the math (arch, vocab_size,
//                           seq_len, layers, hidden, heads, kv_heads, ffn_hidden, norm_eps,
//                           rope_theta, tie_embeddings, dropout, init_std, the moe_* keys);
//                           recompute is left out: it changes memory, not results
//   training.seed, training.global_batch   the data order and the random streams
//   data.format
//   data.train_files[i]     the file's absolute path, size and content digest (file_digest)
//   data.sources[i]         a mixture source's name and weight; data.sources[i].files[j] as
//                           data.train_files[i]
//
// The tokenizer is in the data: shards are token ids, so another tokenizer is another digest.
// Not here, so a resume may change them: [training] steps, lr and the schedule, the
// optimizer's constants, grad_clip, micro_batch, validation ([data] val_files, eval_*),
// recompute and the layout.
//
// Example: a job whose [model] heads went from 4 to 8 gives
//   changed_inputs(stored, now) == {"model.heads: 4 -> 8"}.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/options.h"

namespace partrain::store {

std::string run_inputs(const engine::ModelOptions& model, const engine::TrainOptions& train,
                       const engine::DataOptions& data);

// Each key whose value differs between two run_inputs() texts (or that one of them lacks),
// in the order of `now` then `was`: "model.heads: 4 -> 8", "data.train_files[0]: A -> B".
std::vector<std::string> changed_inputs(std::string_view was, std::string_view now);

// A file's identity: "PATH (SIZE bytes, crc32c:XXXXXXXX)", PATH absolute. The checksum
// covers the whole file up to 8 MiB; a larger one is read in 8 blocks of 1 MiB spread
// evenly from its first to its last byte (at most 8 MiB read per file, whatever its size),
// so a change that keeps the size and falls between the blocks is not seen. "PATH
// (unreadable: why)" when it cannot be read; the trainer then names the file itself.
std::string file_digest(const std::string& path);

}  // namespace partrain::store
