#include "tokenize/encode_corpus.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "engine/data/dataset.h"
#include "engine/io/json.h"

namespace partrain::tokenize {
namespace {

struct Chunk {
  std::string text;
  bool doc_start = false;
};

bool ascii_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// The first cut point ("x\nA": before A) at or after `from`, or npos.
size_t find_cut(const std::string& s, size_t from) {
  for (size_t p = std::max<size_t>(from, 2); p < s.size(); ++p) {
    p = s.find('\n', p - 1);
    if (p == std::string::npos || p + 1 >= s.size()) return std::string::npos;
    ++p;  // just after the newline
    if (ascii_letter(s[p]) && s[p - 2] > ' ' && s[p - 2] <= '~') return p;
  }
  return std::string::npos;
}

// Yields the chunks of every input in order.
class ChunkReader {
 public:
  ChunkReader(const EncodeOptions& o, bool can_cut) : o_(o), can_cut_(can_cut) {}

  // False at the end of the last input; an error names the file and line.
  Result<bool> next(Chunk* out) {
    for (;;) {
      if (has_pending_) {  // a document being cut into chunks
        *out = take_piece();
        return true;
      }
      if (!in_.is_open() || in_.eof()) {
        if (in_.is_open()) in_.close();
        if (file_ == o_.inputs.size()) return false;
        path_ = o_.inputs[file_++];
        in_.open(path_, std::ios::binary);
        if (!in_) return Status::not_found(fmt::format("{}: cannot open text file", path_));
        jsonl_ = path_.size() > 6 && path_.compare(path_.size() - 6, 6, ".jsonl") == 0;
        line_ = 0;
        if (!jsonl_) {  // one document: the whole file
          std::string text((std::istreambuf_iterator<char>(in_)), std::istreambuf_iterator<char>());
          if (in_.bad()) return Status::io_error(fmt::format("{}: read failed", path_));
          in_.setstate(std::ios::eofbit);
          bytes_read_ += text.size();
          start_document(std::move(text));
          continue;
        }
      }
      std::string line;
      if (!std::getline(in_, line)) continue;
      ++line_;
      bytes_read_ += line.size() + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto doc = engine::io::parse_json(line);
      const engine::io::JsonValue* text = nullptr;
      if (doc)
        for (const auto& [k, v] : doc->members)
          if (k == o_.text_key && v.kind == engine::io::JsonValue::Kind::kString) text = &v;
      if (text == nullptr)
        return Status::invalid(fmt::format("{}:{}: expected a JSON object with a string field "
                                           "\"{}\" (name another with --text-key)",
                                           path_, line_, o_.text_key));
      start_document(text->text);
    }
  }

  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void start_document(std::string text) {
    pending_ = std::move(text);
    offset_ = 0;
    doc_start_ = true;
    has_pending_ = true;  // an empty document still gets its separator
  }

  Chunk take_piece() {
    Chunk c;
    c.doc_start = doc_start_;
    doc_start_ = false;
    size_t end = pending_.size();
    if (can_cut_ && end - offset_ > o_.chunk_bytes) {
      const size_t cut = find_cut(pending_, offset_ + o_.chunk_bytes);
      if (cut != std::string::npos) end = cut;
    }
    c.text = pending_.substr(offset_, end - offset_);
    offset_ = end;
    if (offset_ >= pending_.size()) {
      pending_.clear();
      has_pending_ = false;
    }
    return c;
  }

  const EncodeOptions& o_;
  bool can_cut_;
  size_t file_ = 0, line_ = 0, offset_ = 0;
  std::string path_, pending_;
  std::ifstream in_;
  bool jsonl_ = false, doc_start_ = false, has_pending_ = false;
  uint64_t bytes_read_ = 0;
};

// Accumulates tokens and writes a shard whenever shard_tokens are full.
class ShardSink {
 public:
  ShardSink(const EncodeOptions& o, int token_bytes) : o_(o), token_bytes_(token_bytes) {}

  Status add(const std::vector<uint32_t>& ids) {
    for (uint32_t id : ids) {
      buf_.push_back(id);
      if (o_.shard_tokens > 0 && buf_.size() == o_.shard_tokens) PARTRAIN_RETURN_IF_ERROR(flush());
    }
    return Status::ok();
  }
  Status finish() { return buf_.empty() && !written_.empty() ? Status::ok() : flush(); }
  const std::vector<std::string>& written() const { return written_; }

 private:
  Status flush() {
    const std::string path = o_.shard_tokens > 0 ? shard_name(o_.output, written_.size()) : o_.output;
    PARTRAIN_RETURN_IF_ERROR(engine::data::write_shard(path, buf_, token_bytes_));
    written_.push_back(path);
    buf_.clear();
    return Status::ok();
  }
  const EncodeOptions& o_;
  int token_bytes_;
  std::vector<uint32_t> buf_;
  std::vector<std::string> written_;
};

// Encodes chunks[i] into ids[i] on `threads` threads, each taking the next chunk.
void encode_batch(const Tokenizer& tok, std::vector<Chunk>& chunks,
                  std::vector<std::vector<uint32_t>>& ids, int threads, size_t* replaced) {
  std::atomic<size_t> next{0}, bad{0};
  auto work = [&] {
    for (size_t i = next++; i < chunks.size(); i = next++) {
      ids[i].clear();
      if (chunks[i].doc_start) ids[i].push_back(tok.separator());
      bad += to_valid_utf8(&chunks[i].text);
      tok.encode(chunks[i].text, &ids[i]);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  *replaced += bad;
}

}  // namespace

std::string shard_name(const std::string& output, size_t index) {
  const std::filesystem::path p(output);
  const std::string stem = (p.parent_path() / p.stem()).string();
  return fmt::format("{}_{:06d}{}", stem, index, p.extension().string());
}

Result<EncodeSummary> encode_corpus(const Tokenizer& tok, const EncodeOptions& o,
                                    const std::function<void(const EncodeProgress&)>& progress) {
  EncodeSummary s;
  s.token_bytes = o.token_bytes != 0 ? o.token_bytes : (tok.vocab_size() <= 65536 ? 2 : 4);
  if (s.token_bytes == 2 && tok.vocab_size() > 65536)
    return Status::invalid(fmt::format("data encode: {} has ids up to {}, more than uint16 "
                                       "holds; write uint32 tokens", tok.describe(), tok.vocab_size() - 1));
  for (const auto& path : o.inputs) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) return Status::not_found(fmt::format("{}: cannot open text file", path));
    s.totals.bytes_total += size;
  }
  const auto t0 = std::chrono::steady_clock::now();
  ChunkReader reader(o, tok.cuts_at_line_starts());
  ShardSink sink(o, s.token_bytes);
  const int threads = std::max(1, o.threads);
  const size_t batch = static_cast<size_t>(threads) * 4;
  std::vector<Chunk> chunks;
  std::vector<std::vector<uint32_t>> ids(batch);
  for (bool more = true; more;) {
    chunks.clear();
    while (chunks.size() < batch) {
      Chunk c;
      auto got = reader.next(&c);
      if (!got) return got.status();
      if (!*got) {
        more = false;
        break;
      }
      s.totals.documents += c.doc_start ? 1 : 0;
      chunks.push_back(std::move(c));
    }
    encode_batch(tok, chunks, ids, threads, &s.replaced_utf8);
    for (size_t i = 0; i < chunks.size(); ++i) {
      PARTRAIN_RETURN_IF_ERROR(sink.add(ids[i]));
      s.totals.tokens += ids[i].size();
    }
    s.totals.bytes_done = reader.bytes_read();
    s.totals.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (progress) progress(s.totals);
  }
  PARTRAIN_RETURN_IF_ERROR(sink.finish());
  s.shards = sink.written();
  return s;
}

}  // namespace partrain::tokenize
