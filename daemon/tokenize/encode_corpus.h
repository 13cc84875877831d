// `partrain data encode --tokenizer`: text files and JSON-lines files to llm.c token shards,
// streaming, on several threads, every document preceded by the tokenizer's separator
// (llm.c's convention: <|endoftext|> for GPT-2; the first window then starts with one).
//
// Inputs, in the order given: a `.jsonl` file is one document per line (the string field
// `text_key` of each JSON object, the line valid UTF-8 and at most `max_line_bytes` long,
// else an error naming the file and line); any other file is one document. A document
// longer than `chunk_bytes` is encoded in pieces cut just before an ASCII letter that
// follows a '\n' that follows a printable ASCII character ("x\nA"): with the shipped BPE
// patterns no piece spans such a point, so the ids equal those of the whole document.
// SentencePiece documents are not cut that way (its encoder prefixes each call with a space).
//
// Memory is bounded, whatever the input: no piece is longer than `max_chunk_bytes`. A
// document with no such cut point within that (one huge line) is cut by force, past
// chunk_bytes: just after the first '\n', else just before the first ' ', else at a UTF-8
// character boundary at max_chunk_bytes; only the ids next to a forced cut may differ from
// those of the whole document. A SentencePiece document longer than `max_uncut_bytes` is cut
// the same way past half of that (libsentencepiece takes hundreds of bytes of memory per
// byte of one call); each piece then gets SentencePiece's prefix space.
// Peak memory is about threads x (2 chunk_bytes of text + their ids) + 3 x max_chunk_bytes
// + 4 x the longest .jsonl line.
//
// Output: `output` itself, or with `shard_tokens` > 0 shards of that many tokens named
// `output` with _000000, _000001, ... before its extension (train.bin -> train_000000.bin).
// Tokens are uint16 (llm.c version 1) when the vocabulary fits, else uint32 (version 2).
// The ids do not depend on `threads`, nor on `chunk_bytes` unless a cut is forced.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenize/tokenizer.h"

namespace partrain::tokenize {

struct EncodeOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string text_key = "text";   // Default: "text" (the field of a .jsonl line)
  uint64_t shard_tokens = 0;       // Default: 0, one shard
  int threads = 2;                 // Default: 2
  size_t chunk_bytes = 1 << 20;    // Default: 1 MiB per unit of work
  size_t max_chunk_bytes = 4 << 20;  // Default: 4 MiB, the longest piece (see above)
  size_t max_line_bytes = 32 << 20;  // Default: 32 MiB, the longest .jsonl line
  size_t max_uncut_bytes = 64 << 10;  // Default: 64 KiB, the longest SentencePiece piece
  int token_bytes = 0;             // Default: 0, 2 when vocab_size <= 65536, else 4
};

struct EncodeProgress {
  uint64_t bytes_done = 0, bytes_total = 0, tokens = 0, documents = 0;
  double seconds = 0;
};

struct EncodeSummary {
  EncodeProgress totals;
  std::vector<std::string> shards;
  int token_bytes = 2;
  size_t replaced_utf8 = 0;  // invalid UTF-8 sequences read as U+FFFD
};

// `progress` (may be empty) is called after every batch of chunks, from the calling thread.
Result<EncodeSummary> encode_corpus(const Tokenizer& tok, const EncodeOptions& o,
                                    const std::function<void(const EncodeProgress&)>& progress);

// The name of shard `index` of `output` (see above).
std::string shard_name(const std::string& output, size_t index);

}  // namespace partrain::tokenize
