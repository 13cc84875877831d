#include "tokenize/encode_corpus.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
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
        auto c = take_piece();
        if (!c) return c.status();
        *out = std::move(*c);
        return true;
      }
      if (!in_.is_open() || (in_.eof() && !txt_open_)) {
        if (in_.is_open()) in_.close();
        if (file_ == o_.inputs.size()) return false;
        path_ = o_.inputs[file_++];
        in_.open(path_, std::ios::binary);
        if (!in_) return Status::not_found(fmt::format("{}: cannot open text file", path_));
        jsonl_ = path_.size() > 6 && path_.compare(path_.size() - 6, 6, ".jsonl") == 0;
        line_ = 0;
        if (!jsonl_) {  // one document: the whole file, read block by block as it is cut
          start_document(std::string());
          txt_open_ = true;
          if (!can_cut_) PARTRAIN_RETURN_IF_ERROR(read_block(SIZE_MAX));  // never cut: all of it
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
  // Appends up to `n` bytes of the open .txt file to pending_; at its end, closes it.
  Status read_block(size_t n) {
    std::string block(std::min<size_t>(n, o_.chunk_bytes * 4), '\0');
    while (n > 0 && txt_open_) {
      in_.read(block.data(), static_cast<std::streamsize>(std::min(n, block.size())));
      const auto got = static_cast<size_t>(in_.gcount());
      if (in_.bad()) return Status::io_error(fmt::format("{}: read failed", path_));
      pending_.append(block.data(), got);
      bytes_read_ += got;
      n -= std::min(n, got);
      if (got == 0 || in_.eof()) {
        txt_open_ = false;
        in_.setstate(std::ios::eofbit);
      }
    }
    return Status::ok();
  }

  void start_document(std::string text) {
    pending_ = std::move(text);
    offset_ = 0;
    doc_start_ = true;
    has_pending_ = true;  // an empty document still gets its separator
  }

  Result<Chunk> take_piece() {
    Chunk c;
    c.doc_start = doc_start_;
    doc_start_ = false;
    if (offset_ > 0 && txt_open_) {  // drop what is done before reading more
      pending_.erase(0, offset_);
      offset_ = 0;
    }
    size_t end = std::string::npos;
    for (;;) {
      if (txt_open_ && pending_.size() - offset_ < 2 * o_.chunk_bytes)
        PARTRAIN_RETURN_IF_ERROR(read_block(2 * o_.chunk_bytes));
      if (!can_cut_ || pending_.size() - offset_ <= o_.chunk_bytes) {
        if (!txt_open_) break;  // the rest of the document
        continue;
      }
      end = find_cut(pending_, offset_ + o_.chunk_bytes);
      if (end != std::string::npos || !txt_open_) break;
      PARTRAIN_RETURN_IF_ERROR(read_block(o_.chunk_bytes));  // no cut yet: look further
    }
    if (end == std::string::npos) end = pending_.size();
    c.text = pending_.substr(offset_, end - offset_);
    offset_ = end;
    if (offset_ >= pending_.size() && !txt_open_) {
      pending_.clear();
      offset_ = 0;
      has_pending_ = false;
    }
    return c;
  }

  const EncodeOptions& o_;
  bool can_cut_;
  size_t file_ = 0, line_ = 0, offset_ = 0;
  std::string path_, pending_;
  std::ifstream in_;
  bool jsonl_ = false, doc_start_ = false, has_pending_ = false, txt_open_ = false;
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
