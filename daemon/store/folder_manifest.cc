// See folder_manifest.h.
#include "store/folder_manifest.h"

#include <charconv>

#include <fmt/format.h>

#include "common/read_file.h"
#include "engine/io/atomic_file.h"
#include "common/crc32c.h"
#include "store/shard_file.h"

namespace partrain::store {
namespace {

constexpr std::string_view kHeader = "partrain-checkpoint 1\n";
constexpr std::string_view kHashKey = "config_hash ";
constexpr std::string_view kCrcKey = "crc32c ";
// A manifest lists one line per piece (about 150 bytes): 256 MiB is millions of pieces.
constexpr size_t kMaxManifestBytes = size_t{256} << 20;

std::string manifest_path(const std::string& root, int64_t step) {
  return fmt::format("{}/{}/{}", root, step_folder(step), kFolderManifestName);
}

}  // namespace

std::string encode_folder_manifest(const FolderManifest& m) {
  std::string text(kHeader);
  text += fmt::format("{}{}\n", kHashKey, m.config_hash);
  text += encode_checkpoint(m.checkpoint);
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += fmt::format("{}{:08x}\n", kCrcKey, crc32c(text.data(), text.size()));
  return text;
}

Result<FolderManifest> decode_folder_manifest(std::string_view text, const std::string& path) {
  auto bad = [&](const std::string& why) {
    return Status::corruption(fmt::format("{}: damaged checkpoint manifest: {}", path, why));
  };
  if (!text.starts_with(kHeader)) return bad("it does not start with 'partrain-checkpoint 1'");
  // The last line: "crc32c XXXXXXXX\n", over every byte before it.
  if (text.size() < kHeader.size() + kCrcKey.size() + 9 || text.back() != '\n') return bad("it is cut short");
  const size_t last = text.rfind('\n', text.size() - 2);
  if (last == std::string_view::npos) return bad("it is cut short");
  const std::string_view crc_line = text.substr(last + 1, text.size() - last - 2);
  uint32_t want = 0;
  if (!crc_line.starts_with(kCrcKey) || crc_line.size() != kCrcKey.size() + 8) return bad("no CRC-32C line at its end");
  const std::string_view hex = crc_line.substr(kCrcKey.size());
  auto [p, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), want, 16);
  if (ec != std::errc() || p != hex.data() + hex.size()) return bad("no CRC-32C line at its end");
  const std::string_view body = text.substr(0, last + 1);
  const uint32_t actual = crc32c(body.data(), body.size());
  if (actual != want) return bad(fmt::format("checksum mismatch: expected CRC-32C {:08x}, actual {:08x}", want, actual));
  std::string_view rest = body.substr(kHeader.size());
  const size_t eol = rest.find('\n');
  if (!rest.starts_with(kHashKey) || eol == std::string_view::npos) return bad("no config_hash line");
  FolderManifest m;
  m.config_hash = std::string(rest.substr(kHashKey.size(), eol - kHashKey.size()));
  Result<Checkpoint> c = decode_checkpoint(rest.substr(eol + 1));
  if (!c) return bad(c.status().message());
  m.checkpoint = std::move(c).value();
  return m;
}

Status write_folder_manifest(const std::string& root, const FolderManifest& m) {
  const std::string text = encode_folder_manifest(m);
  const engine::io::ByteSpan part{text.data(), text.size()};
  return engine::io::write_file_atomic(manifest_path(root, m.checkpoint.state.step), &part, 1);
}

Result<FolderManifest> read_folder_manifest(const std::string& root, int64_t step) {
  const std::string path = manifest_path(root, step);
  Result<std::string> text = read_regular_file(path, "checkpoint manifest", kMaxManifestBytes);
  if (!text) {
    if (text.status().code() == StatusCode::kNotFound) return text.status();
    return Status::corruption(text.status().message());
  }
  Result<FolderManifest> m = decode_folder_manifest(*text, path);
  if (!m) return m.status();
  if (m->checkpoint.state.step != step) {
    return Status::corruption(fmt::format("{}: damaged checkpoint manifest: it records step {}, its folder is "
                                          "step {}", path, m->checkpoint.state.step, step));
  }
  return m;
}

}  // namespace partrain::store
