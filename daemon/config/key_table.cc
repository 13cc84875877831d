#include "config/key_table.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/read_file.h"

namespace partrain::config::detail {
namespace {

// What a TOML value is, in the words an error message uses.
std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number with a fraction";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time: return "a date/time";
    case toml::node_type::none: break;
  }
  return "nothing";
}

std::string number_text(double v) {
  return fmt::format("{}", v);
}

// Levenshtein distance, two rows.
std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// Tables holding `key`, in rule order, without repeats.
std::vector<std::string> tables_with(const std::vector<std::pair<std::string, std::string>>& known,
                                     const std::string& key) {
  std::vector<std::string> out;
  for (const auto& [t, k] : known) {
    if (k == key && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

}  // namespace

std::string where(const Source& src, int64_t line) {
  return line > 0 ? fmt::format("{}:{}: ", src.file, line) : src.file + ": ";
}

bool Range::contains(double v) const {
  if (std::isnan(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string Range::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) {
    return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", number_text(lo), number_text(hi),
                       hi_open ? ")" : "]");
  }
  if (has_lo) return fmt::format("{} {}", lo_open ? ">" : ">=", number_text(lo));
  if (has_hi) return fmt::format("{} {}", hi_open ? "<" : "<=", number_text(hi));
  return "a number";
}

Result<int64_t> read_integer(const toml::node& node, Range range) {
  if (node.is_floating_point()) {
    return Status::invalid(fmt::format("must be a whole number (got {})",
                                       number_text(node.as_floating_point()->get())));
  }
  if (!node.is_integer()) {
    return Status::invalid("must be an integer (got " + type_name(node) + ")");
  }
  const int64_t v = node.as_integer()->get();
  if (!range.contains(static_cast<double>(v))) {
    return Status::invalid(fmt::format("must be {} (got {})", range.describe(), v));
  }
  return v;
}

Result<double> read_number(const toml::node& node, Range range) {
  double v = 0;
  if (node.is_floating_point()) {
    v = node.as_floating_point()->get();
  } else if (node.is_integer()) {
    v = static_cast<double>(node.as_integer()->get());  // `dropout = 0` is a fine way to say 0.0
  } else {
    return Status::invalid("must be a number (got " + type_name(node) + ")");
  }
  if (!std::isfinite(v)) return Status::invalid(fmt::format("must be finite (got {})", v));
  if (!range.contains(v)) {
    return Status::invalid(fmt::format("must be {} (got {})", range.describe(), number_text(v)));
  }
  return v;
}

Result<bool> read_bool(const toml::node& node) {
  if (!node.is_boolean()) {
    return Status::invalid("must be true or false (got " + type_name(node) + ")");
  }
  return node.as_boolean()->get();
}

Result<std::string> read_string(const toml::node& node) {
  if (!node.is_string()) {
    return Status::invalid("must be a string in quotes (got " + type_name(node) + ")");
  }
  return node.as_string()->get();
}

Result<std::vector<int64_t>> read_integer_array(const toml::node& node, Range range) {
  const toml::array* arr = node.as_array();
  if (arr == nullptr || arr->empty()) {
    return Status::invalid("must be a non-empty array of integers, e.g. [3, 4] (got " + type_name(node) + ")");
  }
  std::vector<int64_t> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    Result<int64_t> v = read_integer(*arr->get(i), range);
    if (!v) return Status::invalid(fmt::format("entry {} {}", i + 1, v.status().message()));
    out.push_back(*v);
  }
  return out;
}

Result<std::vector<std::string>> read_string_array(const toml::node& node) {
  const toml::array* arr = node.as_array();
  if (arr == nullptr) {
    return Status::invalid("must be an array of strings, e.g. [\"a.bin\", \"b.bin\"] (got " +
                           type_name(node) + ")");
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    const toml::node& item = *arr->get(i);
    if (!item.is_string()) {
      return Status::invalid(fmt::format("must be an array of strings (item {} is {})", i + 1,
                                         type_name(item)));
    }
    out.push_back(item.as_string()->get());
  }
  return out;
}

Result<std::string> read_choice(const toml::node& node, const std::vector<std::string>& choices) {
  auto v = read_string(node);
  if (!v) return v.status();
  if (std::find(choices.begin(), choices.end(), *v) != choices.end()) return *v;
  std::vector<std::string> quoted;
  for (const auto& c : choices) quoted.push_back("\"" + c + "\"");
  std::string msg = "must be one of " + join(quoted, ", ") + " (got \"" + *v + "\")";
  return Status::invalid(msg);
}

std::string resolve_path(const std::filesystem::path& base, const std::string& path) {
  std::filesystem::path p(path);
  if (p.is_relative()) p = base / p;
  return p.lexically_normal().string();
}

std::string unknown_key_message(const std::vector<std::pair<std::string, std::string>>& known,
                                const std::string& table, const std::string& key) {
  std::string head = "[" + table + "] key '" + key + "' is unknown; ";
  // The right key in the wrong table: say where it goes.
  auto elsewhere = tables_with(known, key);
  if (!elsewhere.empty()) return head + "it belongs in [" + elsewhere.front() + "]";
  std::vector<std::string> same_table;
  for (const auto& [t, k] : known) {
    if (t == table) same_table.push_back(k);
  }
  std::string best = nearest(key, same_table);
  if (!best.empty()) return head + "did you mean '" + best + "'?";
  return head + "the keys of [" + table + "] are: " + join(same_table, ", ");
}

std::string unknown_table_message(const std::vector<std::pair<std::string, std::string>>& known,
                                  const std::string& table, const std::string& table_hint) {
  std::vector<std::string> tables;
  for (const auto& [t, k] : known) {
    if (std::find(tables.begin(), tables.end(), t) == tables.end()) tables.push_back(t);
  }
  std::string head = "table [" + table + "] is unknown; ";
  std::string best = nearest(table, tables);
  if (!best.empty()) return head + "did you mean [" + best + "]?";
  std::vector<std::string> bracketed;
  for (const auto& t : tables) bracketed.push_back("[" + t + "]");
  return head + "the tables are " + join(bracketed, " ") + table_hint;
}

std::string stray_key_message(const std::vector<std::pair<std::string, std::string>>& known,
                              const std::string& key) {
  std::string head = "key '" + key + "' is outside any table; ";
  auto homes = tables_with(known, key);
  if (!homes.empty()) return head + "put it under [" + homes.front() + "]";
  return head + "every key belongs under a [table] header";
}

std::string respell_spec_error(const std::string& message, const std::string& origin) {
  std::string m = message;
  if (m.rfind("partrain: ", 0) == 0) m = m.substr(10);
  const std::string flag = " in --partrain";
  if (size_t at = m.find(flag); at != std::string::npos) {
    m.replace(at, flag.size(), origin.empty() ? "" : " in " + origin);
  }
  return m;
}

Result<toml::table> parse_toml(const Source& src, std::string_view text) {
  try {
    return toml::parse(text, src.file);
  } catch (const toml::parse_error& e) {
    return Status::invalid(where(src, e.source().begin.line) + "TOML syntax error: " +
                           std::string(e.description()));
  } catch (const std::exception& e) {
    return Status::internal(src.file + ": reading TOML failed: " + e.what());
  }
}

Result<std::string> read_file(const std::string& path, const std::string& what) {
  // A FIFO, device or folder is refused at once; a config is never megabytes.
  return read_regular_file(path, what, kMaxConfigBytes);
}

}  // namespace partrain::config::detail
