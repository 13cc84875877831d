// How both config files (the site config and the job file) are read: each has ONE table of
// accepted keys, a KeyRule per key saying its TOML table, its name, and how a value is
// checked and stored. The same table drives the parser, the "did you mean" suggestions and
// known_*_keys() (which the man-page test compares with partrain.toml(5)), so a key cannot
// be accepted without being documented, or documented without being accepted.
//
// Internal to partrain_config: users of the library see job_config.h and site_config.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "common/nearest.h"
#include "common/status.h"

namespace partrain::config::detail {

// The file being read, for messages and for resolving relative paths.
struct Source {
  std::string file;                // the path as the user gave it: messages start with it
  std::filesystem::path base_dir;  // the file's folder: relative paths in it are resolved here

  // The Source of the file at `path` (its folder made absolute; "." when that fails).
  static Source of(const std::string& path) {
    std::error_code ec;
    std::filesystem::path absolute = std::filesystem::absolute(path, ec);
    return Source{path, ec ? std::filesystem::path(".") : absolute.parent_path()};
  }
};

// "job.toml:7: " when line > 0, else "job.toml: ".
std::string where(const Source& src, int64_t line);

// "table.key" -> the line it was set on, for every key the file set.
using SeenKeys = std::map<std::string, int64_t>;

// A numeric range with open or closed ends; says itself as "> 0", ">= 1", "in [0, 1)".
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false;
  bool hi_open = false;
  bool contains(double v) const;
  std::string describe() const;
};
inline Range at_least(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
inline Range above(double lo) { return {lo, std::numeric_limits<double>::infinity(), true, false}; }
inline Range closed(double lo, double hi) { return {lo, hi, false, false}; }
inline Range half_open(double lo, double hi) { return {lo, hi, false, true}; }

// Typed readers. On a wrong type or value they return Status::invalid with a fragment that
// completes "[table] key 'k' ...", e.g. "must be an integer (got a string)".
Result<int64_t> read_integer(const toml::node& node, Range range);
Result<double> read_number(const toml::node& node, Range range);
Result<bool> read_bool(const toml::node& node);
Result<std::string> read_string(const toml::node& node);
Result<std::vector<std::string>> read_string_array(const toml::node& node);
// A non-empty array of integers, each within `range`.
Result<std::vector<int64_t>> read_integer_array(const toml::node& node, Range range);
// One of `choices`, spelled exactly.
Result<std::string> read_choice(const toml::node& node, const std::vector<std::string>& choices);

// Resolves `path` against `base` unless it is absolute; lexically normalised.
std::string resolve_path(const std::filesystem::path& base, const std::string& path);

// One accepted key. `store` checks the value and writes it into *target.
template <typename T>
struct KeyRule {
  std::string table;
  std::string key;
  std::function<Status(const toml::node&, T*, const Source&)> store;
};

// Rule builders. `get` maps the target to the field: [](T& t) -> auto& { return t.x; }.
template <typename T, typename Get>
KeyRule<T> integer_key(std::string table, std::string key, Get get, Range range) {
  return {std::move(table), std::move(key),
          [get, range](const toml::node& node, T* target, const Source&) -> Status {
            auto& field = get(*target);
            using V = std::remove_reference_t<decltype(field)>;
            auto v = read_integer(node, range);
            if (!v) return v.status();
            // The field's own limits: an int field never takes 2^40 (64-bit fields hold
            // every TOML integer in range; a uint64 field's range starts at 0).
            if constexpr (sizeof(V) < sizeof(int64_t)) {
              const int64_t lo = std::numeric_limits<V>::min(), hi = std::numeric_limits<V>::max();
              if (*v > hi || *v < lo) {
                return Status::invalid((*v > hi ? "must be <= " + std::to_string(hi)
                                                : "must be >= " + std::to_string(lo)) +
                                       " (got " + std::to_string(*v) + ")");
              }
            }
            field = static_cast<V>(*v);
            return Status::ok();
          }};
}

template <typename T, typename Get>
KeyRule<T> number_key(std::string table, std::string key, Get get, Range range) {
  return {std::move(table), std::move(key),
          [get, range](const toml::node& node, T* target, const Source&) -> Status {
            auto v = read_number(node, range);
            if (!v) return v.status();
            auto& field = get(*target);
            field = static_cast<std::remove_reference_t<decltype(field)>>(*v);
            return Status::ok();
          }};
}

template <typename T, typename Get>
KeyRule<T> bool_key(std::string table, std::string key, Get get) {
  return {std::move(table), std::move(key),
          [get](const toml::node& node, T* target, const Source&) -> Status {
            auto v = read_bool(node);
            if (!v) return v.status();
            get(*target) = *v;
            return Status::ok();
          }};
}

// A string; `non_empty` refuses "".
template <typename T, typename Get>
KeyRule<T> string_key(std::string table, std::string key, Get get, bool non_empty = false) {
  return {std::move(table), std::move(key),
          [get, non_empty](const toml::node& node, T* target, const Source&) -> Status {
            auto v = read_string(node);
            if (!v) return v.status();
            if (non_empty && v->empty()) return Status::invalid("must not be empty");
            get(*target) = std::move(*v);
            return Status::ok();
          }};
}

// A path; relative paths are resolved against the file's folder. "" stays "".
template <typename T, typename Get>
KeyRule<T> path_key(std::string table, std::string key, Get get) {
  return {std::move(table), std::move(key),
          [get](const toml::node& node, T* target, const Source& src) -> Status {
            auto v = read_string(node);
            if (!v) return v.status();
            get(*target) = v->empty() ? std::string() : resolve_path(src.base_dir, *v);
            return Status::ok();
          }};
}

// A non-empty array of paths, each resolved against the file's folder.
template <typename T, typename Get>
KeyRule<T> path_list_key(std::string table, std::string key, Get get) {
  return {std::move(table), std::move(key),
          [get](const toml::node& node, T* target, const Source& src) -> Status {
            auto v = read_string_array(node);
            if (!v) return v.status();
            if (v->empty()) return Status::invalid("must name at least one file");
            auto& field = get(*target);
            field.clear();
            for (const auto& p : *v) {
              if (p.empty()) return Status::invalid("must not contain an empty path");
              field.push_back(resolve_path(src.base_dir, p));
            }
            return Status::ok();
          }};
}

// One of a fixed set of words mapped to values, e.g. {"gpt2", Arch::kGpt2}.
template <typename T, typename Get, typename V>
KeyRule<T> choice_key(std::string table, std::string key, Get get,
                      std::vector<std::pair<std::string, V>> words) {
  return {std::move(table), std::move(key),
          [get, words](const toml::node& node, T* target, const Source&) -> Status {
            std::vector<std::string> names;
            for (const auto& w : words) names.push_back(w.first);
            auto v = read_choice(node, names);
            if (!v) return v.status();
            for (const auto& w : words) {
              if (w.first == *v) get(*target) = w.second;
            }
            return Status::ok();
          }};
}

// Messages for keys and tables the rules do not know; each suggests the nearest name.
// `known` lists every (table, key) pair accepted; `table_hint` ends the list of tables
// (e.g. ", or [plugins.NAME] for a strategy plugin").
std::string unknown_key_message(const std::vector<std::pair<std::string, std::string>>& known,
                                 const std::string& table, const std::string& key);
std::string unknown_table_message(const std::vector<std::pair<std::string, std::string>>& known,
                                  const std::string& table, const std::string& table_hint);
std::string stray_key_message(const std::vector<std::pair<std::string, std::string>>& known,
                              const std::string& key);

// The nearest of `candidates` to `word` (common/nearest.h, shared with the command line).
using ::partrain::nearest;

// Applies every table of `root` through `rules`. Top-level names in `passthrough` are left
// to the caller (the job file's [plugins]). Records every key set in *seen.
template <typename T>
Status apply_rules(const toml::table& root, const std::vector<KeyRule<T>>& rules,
                   const Source& src, const std::set<std::string>& passthrough,
                   const std::string& table_hint, T* target, SeenKeys* seen) {
  std::vector<std::pair<std::string, std::string>> known;
  std::set<std::string> tables;
  for (const auto& r : rules) {
    known.emplace_back(r.table, r.key);
    tables.insert(r.table);
  }
  for (const auto& [name_key, value] : root) {
    const std::string name(name_key.str());
    const int64_t name_line = name_key.source().begin.line;
    if (passthrough.count(name)) continue;
    const toml::table* table = value.as_table();
    if (table == nullptr && tables.count(name)) {
      return Status::invalid(where(src, name_line) + "'" + name + "' must be one table: write [" +
                             name + "] on a line of its own, then its keys");
    }
    if (table == nullptr) {
      return Status::invalid(where(src, name_line) + stray_key_message(known, name));
    }
    if (!tables.count(name)) {
      return Status::invalid(where(src, name_line) + unknown_table_message(known, name, table_hint));
    }
    for (const auto& [key_key, node] : *table) {
      const std::string key(key_key.str());
      const int64_t line = key_key.source().begin.line;
      const KeyRule<T>* rule = nullptr;
      for (const auto& r : rules) {
        if (r.table == name && r.key == key) rule = &r;
      }
      if (rule == nullptr) {
        return Status::invalid(where(src, line) + unknown_key_message(known, name, key));
      }
      Status s = rule->store(node, target, src);
      if (!s) return s.prefixed(where(src, line) + "[" + name + "] key '" + key + "' ");
      (*seen)[name + "." + key] = line;
    }
  }
  return Status::ok();
}

// The spec parser's messages are written for --partrain ("partrain: 'tpx' in --partrain:
// ..."); say where the spec really came from ("in PARTRAIN_SPEC"), or nothing when the
// caller's prefix already does ("").
std::string respell_spec_error(const std::string& message, const std::string& origin);

// Parses TOML text; a syntax error becomes "file:line: TOML syntax error: ...".
Result<toml::table> parse_toml(const Source& src, std::string_view text);
// Reads a whole config file (common/read_file.h): a missing file is NotFound naming it; a
// folder, FIFO or device, or more than kMaxConfigBytes, is refused (invalid) at once.
inline constexpr size_t kMaxConfigBytes = size_t{16} << 20;
Result<std::string> read_file(const std::string& path, const std::string& what);

}  // namespace partrain::config::detail
