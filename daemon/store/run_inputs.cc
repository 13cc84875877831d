// See run_inputs.h.
#include "store/run_inputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/crc32c.h"

namespace partrain::store {
namespace {

constexpr int64_t kWholeUpTo = 8 << 20;
constexpr int64_t kBlock = 1 << 20;
constexpr int kBlocks = 8;

// key=value lines into (key, value) pairs, in order.
std::vector<std::pair<std::string, std::string>> lines_of(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    out.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return out;
}

// Reads [at, at + n) of fd into the checksum.
bool crc_range(int fd, int64_t at, int64_t n, uint32_t* crc) {
  std::vector<char> buf(static_cast<size_t>(std::min<int64_t>(n, kBlock)));
  while (n > 0) {
    const ssize_t got = ::pread(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(n, kBlock)), at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    *crc = crc32c(buf.data(), static_cast<size_t>(got), *crc);
    at += got;
    n -= got;
  }
  return true;
}

}  // namespace

std::string file_digest(const std::string& path) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
  const std::string name = ec ? path : abs;
  // O_NONBLOCK: open(2) of a FIFO would otherwise wait for a writer before the check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return fmt::format("{} (unreadable: {})", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fmt::format("{} (unreadable: not a regular file)", name);
  }
  const int64_t size = st.st_size;
  uint32_t crc = 0;
  bool ok = true;
  if (size <= kWholeUpTo) {
    ok = crc_range(fd, 0, size, &crc);
  } else {
    for (int b = 0; b < kBlocks && ok; ++b) {
      const int64_t at = (size - kBlock) * b / (kBlocks - 1);
      ok = crc_range(fd, at, kBlock, &crc);
    }
  }
  ::close(fd);
  if (!ok) return fmt::format("{} (unreadable: a read failed)", name);
  return fmt::format("{} ({} bytes, crc32c:{:08x})", name, size, crc);
}

std::string run_inputs(const engine::ModelOptions& m, const engine::TrainOptions& t,
                       const engine::DataOptions& d) {
  std::string s;
  const auto add = [&s](std::string_view key, const auto& value) { s += fmt::format("{}={}\n", key, value); };
  add("model.arch", m.arch == engine::Arch::kLlama ? "llama" : "gpt2");
  add("model.vocab_size", m.vocab_size);
  add("model.seq_len", m.seq_len);
  add("model.layers", m.layers);
  add("model.hidden", m.hidden);
  add("model.heads", m.heads);
  add("model.kv_heads", m.kv_heads);
  add("model.ffn_hidden", m.ffn_hidden);
  add("model.norm_eps", m.norm_eps);
  add("model.rope_theta", m.rope_theta);
  add("model.tie_embeddings", m.tie_embeddings);
  add("model.dropout", m.dropout);
  add("model.init_std", m.init_std);
  add("model.moe_experts", m.moe_experts);
  add("model.moe_top_k", m.moe_top_k);
  add("model.moe_every", m.moe_every);
  add("model.moe_capacity_factor", m.moe_capacity_factor);
  add("model.moe_aux_loss_coef", m.moe_aux_loss_coef);
  add("training.seed", t.seed);
  add("training.global_batch", t.global_batch);
  add("data.format", d.format);
  for (size_t i = 0; i < d.train_files.size(); ++i) {
    add(fmt::format("data.train_files[{}]", i), file_digest(d.train_files[i]));
  }
  for (size_t i = 0; i < d.sources.size(); ++i) {
    add(fmt::format("data.sources[{}]", i), fmt::format("{} (weight {})", d.sources[i].name, d.sources[i].weight));
    for (size_t j = 0; j < d.sources[i].files.size(); ++j) {
      add(fmt::format("data.sources[{}].files[{}]", i, j), file_digest(d.sources[i].files[j]));
    }
  }
  return s;
}

std::vector<std::string> changed_inputs(std::string_view was, std::string_view now) {
  const auto a = lines_of(was), b = lines_of(now);
  const std::map<std::string, std::string> old(a.begin(), a.end()), fresh(b.begin(), b.end());
  std::vector<std::string> out;
  for (const auto& [key, value] : b) {
    auto it = old.find(key);
    if (it == old.end()) {
      out.push_back(fmt::format("{}: (none) -> {}", key, value));
    } else if (it->second != value) {
      out.push_back(fmt::format("{}: {} -> {}", key, it->second, value));
    }
  }
  for (const auto& [key, value] : a) {
    if (!fresh.count(key)) out.push_back(fmt::format("{}: {} -> (none)", key, value));
  }
  return out;
}

}  // namespace partrain::store
