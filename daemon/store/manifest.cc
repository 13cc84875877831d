// See manifest.h. Lines:
//   state\tstep=8\tconsumed=128\t...          (key=value fields, any order)
//   piece\tNAME\tROLE\tD0xD1\tBEGIN\tEND\tDTYPE\tFILE\tOFFSET\tBYTES\tCRC32C(hex)
#include "store/manifest.h"

#include <algorithm>
#include <charconv>
#include <map>

#include <fmt/format.h>

namespace partrain::store {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t a = 0;
  while (true) {
    const size_t b = s.find(sep, a);
    out.push_back(s.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
    if (b == std::string_view::npos) return out;
    a = b + 1;
  }
}

template <typename T>
bool parse_num(std::string_view s, T* out, int base = 10) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "x" : "") + std::to_string(shape[i]);
  return out.empty() ? "scalar" : out;
}

bool parse_shape(std::string_view s, std::vector<int64_t>* out) {
  out->clear();
  if (s == "scalar") return true;
  for (std::string_view d : split(s, 'x')) {
    int64_t v = 0;
    if (!parse_num(d, &v) || v < 0) return false;
    out->push_back(v);
  }
  return true;
}

Status bad(std::string_view line, const char* why) {
  return Status::corruption(fmt::format("checkpoint record '{}': {}", line.substr(0, 120), why));
}

Result<PieceRecord> decode_piece_line(std::string_view line) {
  const std::vector<std::string_view> f = split(line, '\t');
  if (f.size() != 11 || f[0] != "piece") return bad(line, "not a piece line of 11 fields");
  PieceRecord r;
  r.spec.tensor = std::string(f[1]);
  if (!parse_role(f[2], &r.spec.role)) return bad(line, "unknown role");
  if (!parse_shape(f[3], &r.spec.shape)) return bad(line, "bad shape");
  if (!parse_num(f[4], &r.spec.begin) || !parse_num(f[5], &r.spec.end) ||
      r.spec.begin < 0 || r.spec.end < r.spec.begin) {
    return bad(line, "bad element range");
  }
  r.dtype = std::string(f[6]);
  r.file = std::string(f[7]);
  if (r.file.empty() || r.file.find("..") != std::string::npos || r.file.front() == '/') {
    return bad(line, "bad file name");
  }
  if (!parse_num(f[8], &r.offset) || !parse_num(f[9], &r.bytes) || !parse_num(f[10], &r.crc32c, 16)) {
    return bad(line, "bad offset, size or checksum");
  }
  return r;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kWeight: return "weight";
    case Role::kAdamM: return "adam_m";
    case Role::kAdamV: return "adam_v";
  }
  return "?";
}

bool parse_role(std::string_view text, Role* out) {
  for (Role r : kAllRoles) {
    if (text == role_name(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

int64_t LogicalTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const PieceRecord& p : pieces) n += p.bytes;
  return n;
}

std::string encode_pieces(const std::vector<PieceRecord>& pieces) {
  std::string out;
  for (const PieceRecord& p : pieces) {
    out += fmt::format("piece\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:08x}\n", p.spec.tensor,
                       role_name(p.spec.role), shape_text(p.spec.shape), p.spec.begin, p.spec.end,
                       p.dtype, p.file, p.offset, p.bytes, p.crc32c);
  }
  return out;
}

Result<std::vector<PieceRecord>> decode_pieces(std::string_view text) {
  std::vector<PieceRecord> out;
  for (std::string_view line : split(text, '\n')) {
    if (line.empty() || line.substr(0, 6) == "state\t") continue;
    Result<PieceRecord> r = decode_piece_line(line);
    if (!r) return r.status();
    out.push_back(std::move(r).value());
  }
  return out;
}

std::string encode_state(const TrainState& s) {
  return fmt::format("state\tstep={}\tconsumed={}\tepoch={}\tseed={}\tadam_steps={}\tlr_step={}\t"
                     "decay_steps={}\tloss_scale={}\ttokens={}\tlayout={}\tworld={}\n", s.step,
                     s.consumed_samples, s.epoch, s.seed, s.adam_steps, s.lr_step, s.decay_steps, s.loss_scale,
                     s.tokens, s.layout.empty() ? "-" : s.layout, s.world);
}

Result<TrainState> decode_state(std::string_view text) {
  std::string_view line = text.substr(0, text.find('\n'));
  const std::vector<std::string_view> f = split(line, '\t');
  if (f.empty() || f[0] != "state") return bad(line, "not a state line");
  std::map<std::string_view, std::string_view> kv;
  for (size_t i = 1; i < f.size(); ++i) {
    const size_t eq = f[i].find('=');
    if (eq == std::string_view::npos) return bad(line, "field without '='");
    kv[f[i].substr(0, eq)] = f[i].substr(eq + 1);
  }
  TrainState s;
  const auto need = [&](const char* key) -> std::string_view {
    auto it = kv.find(key);
    return it == kv.end() ? std::string_view() : it->second;
  };
  bool ok = parse_num(need("step"), &s.step) && parse_num(need("consumed"), &s.consumed_samples) &&
            parse_num(need("epoch"), &s.epoch) && parse_num(need("seed"), &s.seed) &&
            parse_num(need("adam_steps"), &s.adam_steps) && parse_num(need("lr_step"), &s.lr_step) &&
            parse_num(need("tokens"), &s.tokens) && parse_num(need("world"), &s.world);
  const std::string_view scale = need("loss_scale");
  ok = ok && std::from_chars(scale.data(), scale.data() + scale.size(), s.loss_scale).ec == std::errc();
  // Optional: absent in checkpoints written before the schedule's length was kept.
  if (kv.count("decay_steps") != 0) ok = ok && parse_num(need("decay_steps"), &s.decay_steps) && s.decay_steps >= 0;
  if (!ok) return bad(line, "missing or malformed field");
  s.layout = need("layout") == "-" ? "" : std::string(need("layout"));
  return s;
}

std::string encode_checkpoint(const Checkpoint& c) { return encode_state(c.state) + encode_pieces(c.pieces); }

Result<Checkpoint> decode_checkpoint(std::string_view text) {
  Checkpoint c;
  Result<TrainState> s = decode_state(text);
  if (!s) return s.status();
  c.state = *s;
  Result<std::vector<PieceRecord>> p = decode_pieces(text);
  if (!p) return p.status();
  c.pieces = std::move(p).value();
  return c;
}

Status check_complete(const std::vector<PieceRecord>& pieces,
                      const std::vector<LogicalTensor>& tensors) {
  std::map<std::pair<std::string, Role>, std::vector<const PieceRecord*>> by;
  for (const PieceRecord& p : pieces) by[{p.spec.tensor, p.spec.role}].push_back(&p);
  for (const LogicalTensor& t : tensors) {
    for (Role role : kAllRoles) {
      std::vector<const PieceRecord*>& list = by[{t.name, role}];
      std::sort(list.begin(), list.end(), [](const PieceRecord* a, const PieceRecord* b) {
        return a->spec.begin < b->spec.begin;
      });
      int64_t at = 0;
      for (const PieceRecord* p : list) {
        if (p->spec.shape != t.shape) {
          return Status::invalid(fmt::format("{} {}: piece has shape {}, the model's is {}", t.name,
                                             role_name(role), shape_text(p->spec.shape), shape_text(t.shape)));
        }
        if (p->spec.begin != at) {
          return Status::invalid(fmt::format("{} {}: elements [{}, {}) {}", t.name, role_name(role), at,
                                             p->spec.begin, p->spec.begin > at ? "are in no piece" : "are in two pieces"));
        }
        if (p->dtype != "F32" || p->bytes != static_cast<uint64_t>(p->spec.end - p->spec.begin) * 4) {
          return Status::invalid(fmt::format("{} {}: piece of {} bytes does not hold {} F32 elements",
                                             t.name, role_name(role), p->bytes, p->spec.end - p->spec.begin));
        }
        at = p->spec.end;
      }
      if (at != t.numel()) {
        return Status::invalid(fmt::format("{} {}: elements [{}, {}) are in no piece", t.name,
                                           role_name(role), at, t.numel()));
      }
    }
  }
  return Status::ok();
}

std::vector<PieceSpec> dp_slice_pieces(const std::vector<LogicalTensor>& tensors, int dp, int dp_rank) {
  std::vector<PieceSpec> out;
  for (Role role : kAllRoles) {
    for (const LogicalTensor& t : tensors) {
      const int64_t n = t.numel();
      PieceSpec p{t.name, t.shape, role, n * dp_rank / dp, n * (dp_rank + 1) / dp};
      if (p.end > p.begin) out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace partrain::store
