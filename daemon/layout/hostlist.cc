// Expansion of Slurm host lists and task counts (see hostlist.h).
#include "layout/hostlist.h"

#include <charconv>

namespace partrain {
namespace {

// More names than any cluster has, in all and in bytes: a guard against "n[1-999999999]"
// typos and against many ranges that are each small enough (130 of n[1-1000000]).
constexpr size_t kMaxHosts = 1 << 20;
constexpr size_t kMaxHostBytes = size_t{64} << 20;

size_t bytes_of(const std::vector<std::string>& names) {
  size_t n = 0;
  for (const std::string& s : names) n += s.size();
  return n;
}

Status list_error(std::string_view what, std::string_view text, const std::string& why) {
  return Status::invalid("partrain: " + std::string(what) + " '" + std::string(text) + "': " +
                         why);
}

bool parse_number(std::string_view s, long long* out) {
  if (s.empty() || s.size() > 12) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::string padded(long long n, size_t width) {
  std::string s = std::to_string(n);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Expands the inside of one bracket, "1-3,7" -> "1" "2" "3" "7".
Status expand_range(std::string_view inside, std::string_view what, std::string_view text,
                    std::vector<std::string>* out) {
  size_t start = 0;
  while (start <= inside.size()) {
    size_t comma = inside.find(',', start);
    if (comma == std::string_view::npos) comma = inside.size();
    std::string_view part = inside.substr(start, comma - start);
    size_t dash = part.find('-');
    std::string_view lo_text = part.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : part.substr(dash + 1);
    long long lo = 0;
    long long hi = 0;
    if (!parse_number(lo_text, &lo) || !parse_number(hi_text, &hi)) {
      return list_error(what, text, "'" + std::string(part) +
                                        "' is not a number or range; write e.g. n[1-4,7]");
    }
    if (hi < lo) {
      return list_error(what, text, "range '" + std::string(part) +
                                        "' counts down; write the lower bound first");
    }
    if (static_cast<unsigned long long>(hi - lo) + out->size() >= kMaxHosts) {
      return list_error(what, text, "range '" + std::string(part) + "' is too large");
    }
    for (long long n = lo; n <= hi; ++n) out->push_back(padded(n, lo_text.size()));
    start = comma + 1;
  }
  return Status::ok();
}

// Expands one host expression without top-level commas, e.g. "r[1-2]n[01-02]", onto *out
// (which already holds `out_bytes` bytes of names), within kMaxHosts and kMaxHostBytes.
Status expand_one(std::string_view expr, std::string_view what, std::string_view text,
                  std::vector<std::string>* out, size_t* out_bytes) {
  std::vector<std::string> names = {""};
  size_t pos = 0;
  while (pos < expr.size()) {
    size_t open = expr.find('[', pos);
    std::string_view literal = expr.substr(pos, open == std::string_view::npos ? expr.npos
                                                                               : open - pos);
    if (literal.find(']') != std::string_view::npos) {
      return list_error(what, text, "']' without '['; write e.g. n[1-4,7]");
    }
    if (*out_bytes + bytes_of(names) + names.size() * literal.size() >= kMaxHostBytes) {
      return list_error(what, text, "expands to too many names");
    }
    for (std::string& n : names) n += literal;
    if (open == std::string_view::npos) break;
    size_t close = expr.find(']', open);
    if (close == std::string_view::npos) {
      return list_error(what, text, "missing ']'; write e.g. n[1-4,7]");
    }
    std::string_view inside = expr.substr(open + 1, close - open - 1);
    if (inside.find('[') != std::string_view::npos) {
      return list_error(what, text, "nested '['; write e.g. n[1-4,7]");
    }
    std::vector<std::string> suffixes;
    PARTRAIN_RETURN_IF_ERROR(expand_range(inside, what, text, &suffixes));
    const size_t bytes = bytes_of(names) * suffixes.size() + names.size() * bytes_of(suffixes);
    if (out->size() + names.size() * suffixes.size() >= kMaxHosts || *out_bytes + bytes >= kMaxHostBytes) {
      return list_error(what, text, "expands to too many names");
    }
    std::vector<std::string> next;
    next.reserve(names.size() * suffixes.size());
    for (const std::string& n : names) {
      for (const std::string& s : suffixes) next.push_back(n + s);
    }
    names = std::move(next);
    pos = close + 1;
  }
  if (names.size() == 1 && names[0].empty()) {
    return list_error(what, text, "empty host name; remove the extra comma");
  }
  if (out->size() + names.size() >= kMaxHosts || *out_bytes + bytes_of(names) >= kMaxHostBytes) {
    return list_error(what, text, "expands to too many names");
  }
  *out_bytes += bytes_of(names);
  out->insert(out->end(), names.begin(), names.end());
  return Status::ok();
}

}  // namespace

Result<std::vector<std::string>> expand_hostlist(std::string_view text, std::string_view what) {
  std::vector<std::string> hosts;
  size_t bytes = 0;
  if (text.empty()) return list_error(what, text, "empty; give at least one host name");
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    char c = i < text.size() ? text[i] : ',';
    if (c == ' ' || c == '\t') {
      return list_error(what, text, "contains a space; separate names with commas only");
    }
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && (depth <= 0 || i == text.size())) {
      PARTRAIN_RETURN_IF_ERROR(expand_one(text.substr(start, i - start), what, text, &hosts, &bytes));
      start = i + 1;
    }
  }
  return hosts;
}

Result<std::vector<int>> expand_task_counts(std::string_view text, std::string_view what) {
  std::vector<int> counts;
  if (text.empty()) return list_error(what, text, "empty; write e.g. 4(x2),2");
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view part = text.substr(start, comma - start);
    long long count = 0;
    long long repeat = 1;
    size_t paren = part.find('(');
    bool ok = parse_number(part.substr(0, paren), &count) && count >= 1 && count <= 1 << 20;
    if (ok && paren != std::string_view::npos) {
      std::string_view rep = part.substr(paren);
      ok = rep.size() > 3 && rep.substr(0, 2) == "(x" && rep.back() == ')' &&
           parse_number(rep.substr(2, rep.size() - 3), &repeat) && repeat >= 1 &&
           repeat <= 1 << 20;
    }
    if (!ok) {
      return list_error(what, text, "'" + std::string(part) +
                                        "' is not a positive count or COUNT(xREPEAT); write "
                                        "e.g. 4(x2),2");
    }
    if (counts.size() + static_cast<size_t>(repeat) >= kMaxHosts) {
      return list_error(what, text, "too many nodes");
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(count));
    start = comma + 1;
  }
  return counts;
}

}  // namespace partrain
