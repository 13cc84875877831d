#include "tokenize/encode_corpus.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <span>
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

// Text files and .jsonl lines are read this much at a time.
constexpr size_t kReadBlock = size_t{1} << 20;

// The first cut point ("x\nA": before A) in [from, limit], or npos.
size_t find_cut(const std::string& s, size_t from, size_t limit) {
  for (size_t p = std::max<size_t>(from, 2); p < s.size() && p <= limit; ++p) {
    p = s.find('\n', p - 1);
    if (p == std::string::npos || p + 1 >= s.size() || p + 1 > limit) return std::string::npos;
    ++p;  // just after the newline
    if (ascii_letter(s[p]) && s[p - 2] > ' ' && s[p - 2] <= '~') return p;
  }
  return std::string::npos;
}

bool utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Where a piece that found no cut point by `limit` ends (from < limit < s.size()): just
// after the first '\n' in [from, limit), else just before the first ' ' in (from, limit],
// else at the last UTF-8 character boundary at or before `limit`.
size_t forced_cut(const std::string& s, size_t from, size_t limit) {
  const size_t nl = s.find('\n', from);
  if (nl != std::string::npos && nl < limit) return nl + 1;
  const size_t sp = s.find(' ', from + 1);
  if (sp != std::string::npos && sp <= limit) return sp;
  size_t p = limit;
  while (p > from + 1 && utf8_continuation(s[p])) --p;
  return p;
}

// Yields the chunks of every input in order, holding at most about max_chunk_bytes of a text
// file and max_line_bytes of a .jsonl line at a time.
class ChunkReader {
 public:
  ChunkReader(const EncodeOptions& o, bool can_cut)
      : o_(o),
        can_cut_(can_cut),
        max_chunk_(can_cut ? std::max(o.max_chunk_bytes, o.chunk_bytes)
                           : std::max<size_t>(o.max_uncut_bytes, 2)),
        cut_from_(can_cut ? o.chunk_bytes : max_chunk_ / 2) {}

  // False at the end of the last input; an error names the file and line.
  Result<bool> next(Chunk* out) {
    for (;;) {
      if (has_pending_) {  // a document being cut into chunks
        auto c = take_piece();
        if (!c) return c.status();
        *out = std::move(*c);
        return true;
      }
      if (!in_.is_open() || (jsonl_ && at_end_)) {
        if (in_.is_open()) in_.close();
        if (file_ == o_.inputs.size()) return false;
        path_ = o_.inputs[file_++];
        in_.clear();
        in_.open(path_, std::ios::binary);
        if (!in_) return Status::not_found(fmt::format("{}: cannot open text file", path_));
        jsonl_ = path_.size() > 6 && path_.compare(path_.size() - 6, 6, ".jsonl") == 0;
        line_ = 0;
        at_end_ = false;
        line_buf_.clear();
        line_pos_ = line_scanned_ = 0;
        if (!jsonl_) {  // one document: the whole file, read block by block as it is cut
          start_document(std::string());
          txt_open_ = true;
          continue;
        }
      }
      std::string line;
      auto got = read_line(&line);
      if (!got) return got.status();
      if (!*got) {
        at_end_ = true;
        continue;
      }
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      if (const size_t bad = first_invalid_utf8(line); bad != std::string::npos)
        return Status::invalid(fmt::format("{}:{}: byte {} of the line is not UTF-8 (JSON text "
                                           "must be UTF-8); convert the file, e.g. iconv -f "
                                           "latin1 -t utf-8",
                                           path_, line_, bad + 1));
      auto doc = engine::io::parse_json(line);
      line = std::string();  // the document's text is all that is kept
      engine::io::JsonValue* text = nullptr;
      if (doc)
        for (auto& [k, v] : doc->members)
          if (k == o_.text_key && v.kind == engine::io::JsonValue::Kind::kString) text = &v;
      if (text == nullptr)
        return Status::invalid(fmt::format("{}:{}: expected a JSON object with a string field "
                                           "\"{}\" (name another with --text-key)",
                                           path_, line_, o_.text_key));
      start_document(std::move(text->text));
    }
  }

  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // The next line of the open .jsonl file, without its '\n'; false at its end. A line longer
  // than max_line_bytes is refused before more of it is read.
  Result<bool> read_line(std::string* line) {
    for (;;) {
      const size_t nl = line_buf_.find('\n', line_scanned_);
      const bool last = nl == std::string::npos && in_.eof();  // a last line with no '\n'
      const size_t end = nl == std::string::npos ? line_buf_.size() : nl;
      if (end - line_pos_ > o_.max_line_bytes)
        return Status::invalid(fmt::format(
            "{}:{}: a line longer than {} bytes; raise --max-line-bytes, or split the document "
            "into several lines",
            path_, line_ + 1, o_.max_line_bytes));
      if (nl != std::string::npos || (last && line_pos_ < line_buf_.size())) {
        line->assign(line_buf_, line_pos_, end - line_pos_);
        bytes_read_ += end - line_pos_ + (last ? 0 : 1);
        line_pos_ = line_scanned_ = last ? end : end + 1;
        ++line_;
        return true;
      }
      if (last) return false;
      line_buf_.erase(0, line_pos_);
      line_pos_ = 0;
      line_scanned_ = line_buf_.size();
      const size_t old = line_buf_.size();
      line_buf_.resize(old + kReadBlock);
      in_.read(line_buf_.data() + old, static_cast<std::streamsize>(kReadBlock));
      if (in_.bad()) return Status::io_error(fmt::format("{}: read failed", path_));
      line_buf_.resize(old + static_cast<size_t>(in_.gcount()));
    }
  }

  // Appends up to `n` bytes of the open .txt file to pending_; at its end, closes it.
  Status read_block(size_t n) {
    while (n > 0 && txt_open_) {
      const size_t take = std::min(n, kReadBlock), old = pending_.size();
      pending_.resize(old + take);
      in_.read(pending_.data() + old, static_cast<std::streamsize>(take));
      if (in_.bad()) return Status::io_error(fmt::format("{}: read failed", path_));
      const auto got = static_cast<size_t>(in_.gcount());
      pending_.resize(old + got);
      bytes_read_ += got;
      n -= got;
      if (got < take || in_.eof()) {
        txt_open_ = false;
        in_.close();
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

  // The next piece of the document: all that is left when it fits one piece (chunk_bytes
  // where a cut keeps the ids, else max_uncut_bytes); else up to the first cut point past
  // chunk_bytes; else, with no cut point within max_chunk_bytes, a forced cut.
  Result<Chunk> take_piece() {
    Chunk c;
    c.doc_start = doc_start_;
    doc_start_ = false;
    if (txt_open_ && offset_ > 0) {  // drop what is done before reading more
      pending_.erase(0, offset_);
      offset_ = 0;
    }
    // Look one byte past the longest piece, so "the rest fits" is known.
    if (txt_open_ && pending_.size() <= max_chunk_)
      PARTRAIN_RETURN_IF_ERROR(read_block(max_chunk_ + 1 - pending_.size()));
    const size_t avail = pending_.size() - offset_;
    size_t end = pending_.size();
    if (avail > (can_cut_ ? o_.chunk_bytes : max_chunk_)) {
      const size_t from = offset_ + cut_from_, limit = offset_ + max_chunk_;
      end = can_cut_ ? find_cut(pending_, from, limit) : std::string::npos;
      if (end == std::string::npos)
        end = avail <= max_chunk_ ? pending_.size() : forced_cut(pending_, from, limit);
    }
    if (offset_ == 0 && end == pending_.size()) {
      c.text = std::move(pending_);
      pending_.clear();
    } else {
      c.text = pending_.substr(offset_, end - offset_);
    }
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
  size_t max_chunk_, cut_from_;
  size_t file_ = 0, line_ = 0, offset_ = 0, line_pos_ = 0, line_scanned_ = 0;
  std::string path_, pending_, line_buf_;
  std::ifstream in_;
  bool jsonl_ = false, doc_start_ = false, has_pending_ = false, txt_open_ = false, at_end_ = false;
  uint64_t bytes_read_ = 0;
};

// Streams tokens into shards, a new one whenever shard_tokens are full.
class ShardSink {
 public:
  ShardSink(const EncodeOptions& o, int token_bytes) : o_(o), token_bytes_(token_bytes) {}

  Status add(const std::vector<uint32_t>& ids) {
    std::span<const uint32_t> rest(ids);
    while (!rest.empty()) {
      if (!open_) PARTRAIN_RETURN_IF_ERROR(open_next());
      const uint64_t room = o_.shard_tokens > 0 ? o_.shard_tokens - writer_.tokens() : rest.size();
      const size_t n = static_cast<size_t>(std::min<uint64_t>(room, rest.size()));
      PARTRAIN_RETURN_IF_ERROR(writer_.add(rest.first(n)));
      rest = rest.subspan(n);
      if (o_.shard_tokens > 0 && writer_.tokens() == o_.shard_tokens) PARTRAIN_RETURN_IF_ERROR(close());
    }
    return Status::ok();
  }
  // Closes the last shard; with no tokens at all, writes one empty shard.
  Status finish() {
    if (!open_ && written_.empty()) PARTRAIN_RETURN_IF_ERROR(open_next());
    return open_ ? close() : Status::ok();
  }
  const std::vector<std::string>& written() const { return written_; }

 private:
  Status open_next() {
    path_ = o_.shard_tokens > 0 ? shard_name(o_.output, written_.size()) : o_.output;
    PARTRAIN_RETURN_IF_ERROR(writer_.open(path_, token_bytes_));
    open_ = true;
    return Status::ok();
  }
  Status close() {
    open_ = false;
    PARTRAIN_RETURN_IF_ERROR(writer_.finish());
    written_.push_back(path_);
    return Status::ok();
  }
  const EncodeOptions& o_;
  int token_bytes_;
  engine::data::ShardWriter writer_;
  bool open_ = false;
  std::string path_;
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
  const size_t batch_limit = static_cast<size_t>(threads) * 2 * o.chunk_bytes;
  std::vector<Chunk> chunks;
  std::vector<std::vector<uint32_t>> ids(batch);
  for (bool more = true; more;) {
    chunks.clear();
    // A batch holds about two pieces per thread, by count and by bytes.
    for (size_t batch_bytes = 0; chunks.size() < batch && batch_bytes < batch_limit;) {
      Chunk c;
      auto got = reader.next(&c);
      if (!got) return got.status();
      if (!*got) {
        more = false;
        break;
      }
      s.totals.documents += c.doc_start ? 1 : 0;
      batch_bytes += c.text.size();
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
