// `partrain data`: make and look at token shards.
//
//   partrain data encode --tokenizer FILE TEXT|JSONL... -o SHARD [--threads N]
//                        [--shard-tokens N] [--text-key KEY] [--max-line-bytes N] [--uint32]
//   partrain data encode --bytes TEXT... -o SHARD [--val-output SHARD --val-fraction F]
//   partrain data inspect SHARD... [--format auto|llmc|raw-u16|raw-u32]
//
// `--tokenizer` reads a tokenizer.json, a tiktoken rank file or a SentencePiece model
// (tokenize/encode_corpus.h says how documents are read, separated and sharded).
// `encode --bytes` is the byte-level tokenizer (token = byte value, vocab_size 256): it
// needs no vocabulary file, so the shipped example corpus can be rebuilt anywhere. With
// --val-output, the last F of every text goes to the validation shard, the rest to SHARD.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <span>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "common/exit_codes.h"
#include "common/read_file.h"
#include "cli/fail.h"
#include "common/cpu_budget.h"
#include "common/units.h"
#include "engine/data/dataset.h"
#include "tokenize/encode_corpus.h"
#include "tokenize/tokenizer.h"

namespace partrain::cli {
namespace {

namespace data = partrain::engine::data;

struct EncodeArgs {
  bool bytes = false;
  std::string tokenizer;
  int threads = 0;  // 0: thread_count() (OMP_NUM_THREADS, else the CPUs this process may use)
  uint64_t shard_tokens = 0;
  std::string text_key = "text";
  uint64_t max_line_bytes = tokenize::EncodeOptions{}.max_line_bytes;
  std::vector<std::string> texts;
  std::string output;
  std::string val_output;
  double val_fraction = 0.1;
  bool uint32 = false;
};


// One line, redrawn in place on a terminal: 45% 123.4 MiB / 270.0 MiB ...
void draw_progress(const tokenize::EncodeProgress& p) {
  const double pct = p.bytes_total ? 100.0 * static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 100.0;
  const double rate = p.seconds > 0 ? static_cast<double>(p.bytes_done) / p.seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : 0.0;
  std::fprintf(stderr, "\r\033[Kencode %3.0f%%  %s / %s  %s/s  %s tokens  %s documents  ETA %s",
               pct, human_bytes(static_cast<double>(p.bytes_done)).c_str(),
               human_bytes(static_cast<double>(p.bytes_total)).c_str(), human_bytes(rate).c_str(),
               human_count(static_cast<double>(p.tokens)).c_str(),
               human_count(static_cast<double>(p.documents)).c_str(), human_ms(eta * 1000.0).c_str());
  std::fflush(stderr);
}

int run_tokenizer_encode(const EncodeArgs& a) {
  if (!a.val_output.empty())
    return fail(Status::invalid("data encode: --val-output goes with --bytes; with --tokenizer "
                                "encode the validation texts into their own shard (a second "
                                "`partrain data encode`)"));
  if (a.threads < 0)
    return fail(Status::invalid(fmt::format("data encode: --threads {} must be at least 1", a.threads)));
  const int threads = thread_count(a.threads);
  auto tok = tokenize::load_tokenizer(a.tokenizer);
  if (!tok) return fail(tok.status());
  tokenize::EncodeOptions o;
  o.inputs = a.texts;
  o.output = a.output;
  o.text_key = a.text_key;
  if (a.max_line_bytes == 0)
    return fail(Status::invalid("data encode: --max-line-bytes 0; give the longest .jsonl line "
                                "to read, in bytes (default 33554432, 32 MiB)"));
  o.max_line_bytes = static_cast<size_t>(a.max_line_bytes);
  o.shard_tokens = a.shard_tokens;
  o.threads = threads;
  o.token_bytes = a.uint32 ? 4 : 0;
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::function<void(const tokenize::EncodeProgress&)> progress;
  if (tty) progress = draw_progress;
  auto s = tokenize::encode_corpus(**tok, o, progress);
  if (tty) std::fprintf(stderr, "\r\033[K");
  if (!s) return fail(s.status());
  const auto& t = s->totals;
  std::printf("encoded %s in %s with %s: %s tokens (%s/s, %s tokens/s on %s), "
              "%s\n",
              human_bytes(static_cast<double>(t.bytes_total)).c_str(),
              plural(static_cast<int64_t>(t.documents), "document").c_str(),
              (*tok)->describe().c_str(), human_count(static_cast<double>(t.tokens)).c_str(),
              human_bytes(t.seconds > 0 ? static_cast<double>(t.bytes_total) / t.seconds : 0).c_str(),
              human_count(t.seconds > 0 ? static_cast<double>(t.tokens) / t.seconds : 0).c_str(),
              plural(threads, "thread").c_str(), human_ms(t.seconds * 1000.0).c_str());
  for (const auto& shard : s->shards)
    std::printf("wrote %s (llm.c, uint%d)\n", shard.c_str(), s->token_bytes * 8);
  if (s->replaced_utf8 > 0)
    std::printf("note: %zu invalid UTF-8 sequences were read as U+FFFD\n", s->replaced_utf8);
  std::printf("set [model] vocab_size >= %u\n", (*tok)->vocab_size());
  return kExitOk;
}

int run_encode(const EncodeArgs& a) {
  if (a.bytes == !a.tokenizer.empty())
    return fail(Status::invalid("data encode: name one tokenizer: --tokenizer FILE (a "
                                "tokenizer.json, .tiktoken or SentencePiece .model) or --bytes "
                                "(byte-level, vocab_size 256)"));
  if (!a.tokenizer.empty()) return run_tokenizer_encode(a);
  if (!(a.val_fraction >= 0.0 && a.val_fraction < 1.0))
    return fail(Status::invalid(fmt::format(
        "data encode: --val-fraction {} must be in [0, 1)", a.val_fraction)));
  // Streamed in 1 MiB blocks: memory does not grow with the texts.
  const int width = a.uint32 ? 4 : 2;
  data::ShardWriter train, val;
  Status st = train.open(a.output, width);
  if (st.is_ok() && !a.val_output.empty()) st = val.open(a.val_output, width);
  if (!st) return fail(st);
  std::vector<char> block(size_t{1} << 20);
  std::vector<uint32_t> tokens;
  for (const auto& path : a.texts) {
    // A FIFO or device is refused at once: its size is not known.
    auto file = open_regular_file(path, "text file");
    if (!file) return fail(file.status());
    // The tail of each text is held out, so every text is seen in both splits.
    const auto n = static_cast<uint64_t>(file->size());
    const uint64_t held = a.val_output.empty()
                              ? 0
                              : static_cast<uint64_t>(std::floor(static_cast<double>(n) * a.val_fraction));
    for (uint64_t done = 0; done < n;) {
      const ssize_t got = ::read(file->fd(), block.data(), std::min<uint64_t>(block.size(), n - done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        return fail(Status::io_error(fmt::format("{}: read failed at byte {} of {}: {}", path, done, n,
                                                 got == 0 ? "the file shrank" : std::strerror(errno))));
      tokens.assign(reinterpret_cast<const unsigned char*>(block.data()),
                    reinterpret_cast<const unsigned char*>(block.data()) + got);
      const size_t to_train = static_cast<size_t>(std::min<uint64_t>(tokens.size(), n - held - std::min(done, n - held)));
      st = train.add(std::span<const uint32_t>(tokens).first(to_train));
      if (st.is_ok() && to_train < tokens.size()) st = val.add(std::span<const uint32_t>(tokens).subspan(to_train));
      if (!st) return fail(st);
      done += static_cast<uint64_t>(got);
    }
  }
  if (st = train.finish(); !st) return fail(st);
  std::printf("wrote %s: %llu tokens (llm.c, uint%d, byte-level vocab 256) from %zu texts\n",
              a.output.c_str(), static_cast<unsigned long long>(train.tokens()), width * 8, a.texts.size());
  if (!a.val_output.empty()) {
    if (st = val.finish(); !st) return fail(st);
    std::printf("wrote %s: %llu tokens (the last %.0f%% of each text)\n", a.val_output.c_str(),
                static_cast<unsigned long long>(val.tokens()), a.val_fraction * 100.0);
  }
  return kExitOk;
}

int run_inspect(const std::vector<std::string>& shards, const std::string& format) {
  for (const auto& path : shards) {
    auto info = data::inspect_shard(path, format);
    if (!info) return fail(info.status());
    std::printf("%s\n  format  %s\n  tokens  %llu\n", path.c_str(),
                data::shard_format_name(info->format),
                static_cast<unsigned long long>(info->num_tokens));
    if (info->num_tokens > 0)
      std::printf("  range   [%u, %u] (needs vocab_size >= %llu)\n", info->min_token,
                  info->max_token, static_cast<unsigned long long>(info->max_token) + 1);
  }
  return kExitOk;
}

}  // namespace

void register_data(CLI::App& app, CommandResult* result) {
  CLI::App* cmd = app.add_subcommand("data", "Make and inspect token shards (llm.c format)");
  cmd->require_subcommand(1);

  auto encode_args = std::make_shared<EncodeArgs>();
  CLI::App* encode = cmd->add_subcommand(
      "encode",
      "Tokenize text files into llm.c shards, in bounded memory: a document with no cut point "
      "that keeps the ids within 4 MiB (one huge line) is cut by force past 1 MiB (first newline, "
      "else first space, else a UTF-8 boundary), a SentencePiece document past 32 KiB when over "
      "64 KiB; ids may differ next to such a cut (partrain(1))");
  encode->add_option("--tokenizer", encode_args->tokenizer,
                     "tokenizer.json, tiktoken rank file or SentencePiece .model")
      ->check(CLI::ExistingFile);
  encode->add_flag("--bytes", encode_args->bytes,
                   "Byte-level tokenizer: one token per byte, vocab_size 256");
  encode->add_option("--threads", encode_args->threads,
                     "Encoding threads (default: OMP_NUM_THREADS, else the CPUs this process may use: its "
                     "affinity mask within its cgroup's CPU quota)");
  encode->add_option("--shard-tokens", encode_args->shard_tokens,
                     "Tokens per shard: OUT_000000.bin, OUT_000001.bin, ... (default: one shard)");
  encode->add_option("--text-key", encode_args->text_key,
                     "The string field of each .jsonl line (default \"text\")");
  encode->add_option("--max-line-bytes", encode_args->max_line_bytes,
                     "The longest .jsonl line read; a longer one is refused, naming its file and line "
                     "(default 33554432, 32 MiB; memory grows by about 4 bytes per byte of it)");
  encode->add_option("texts", encode_args->texts,
                     "Text files (one document each) and .jsonl files (one per line), in order")
      ->required()
      ->check(CLI::ExistingFile);
  encode->add_option("-o,--output", encode_args->output, "Shard to write")->required();
  encode->add_option("--val-output", encode_args->val_output,
                     "Also write a validation shard from the tail of each text (with --bytes only: a "
                     "tokenizer's ids change where a text is cut, so with --tokenizer encode the "
                     "validation texts into their own shard)");
  encode->add_option("--val-fraction", encode_args->val_fraction,
                     "Share of each text held out for --val-output (default 0.1)");
  encode->add_flag("--uint32", encode_args->uint32,
                   "Write uint32 tokens (llm.c version 2) instead of uint16 (version 1)");
  encode->callback([encode_args, result] { result->exit_code = run_encode(*encode_args); });

  auto shards = std::make_shared<std::vector<std::string>>();
  auto format = std::make_shared<std::string>("auto");
  CLI::App* inspect = cmd->add_subcommand("inspect", "Show a shard's format, token count and range");
  inspect->add_option("shards", *shards, "Token shards")->required();
  inspect->add_option("--format", *format, "auto (by header), llmc, raw-u16 or raw-u32")
      ->check(CLI::IsMember({"auto", "llmc", "raw-u16", "raw-u32"}));
  inspect->callback([shards, format, result] { result->exit_code = run_inspect(*shards, *format); });
}

}  // namespace partrain::cli
