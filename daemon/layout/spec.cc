// Parsing and printing of the `--partrain=SPEC` value (see spec.h for the grammar).
// Every error is one line for the user: it quotes the item and says how to write it.
#include "layout/spec.h"

#include <charconv>
#include <map>
#include <string>
#include <vector>

namespace partrain {
namespace {

// Largest degree or count we accept; anything bigger is a typo, not a cluster.
constexpr int kMaxNumber = 1 << 20;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A positive whole number written with digits only ("4", not "+4", "4.0" or "0x4").
std::optional<int> parse_positive(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < 1 || value > kMaxNumber) {
    return std::nullopt;
  }
  return value;
}

Status item_error(std::string_view item, const std::string& what) {
  return Status::invalid("partrain: '" + std::string(item) + "' in --partrain: " + what);
}

bool valid_sched_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Applies one item to *spec. `key` receives the item's key for the duplicate check
// ("tp", "zero", "sp" for both sp and nosp, "sched", "cpimpl", "grad", "mb").
Status apply_item(std::string_view item, ParallelSpec* spec, std::string* key) {
  if (item.find_first_of(" \t") != std::string_view::npos) {
    return item_error(item, "separate items with commas, e.g. tp4,pp2");
  }
  if (item == "sp" || item == "nosp") {
    *key = "sp";
    spec->sp = (item == "sp");
    return Status::ok();
  }
  if (item.rfind("sched=", 0) == 0) {
    *key = "sched";
    std::string_view rest = item.substr(6);
    std::string_view name = rest;
    int v = 1;
    bool has_v = false;
    if (size_t colon = rest.find(':'); colon != std::string_view::npos) {
      name = rest.substr(0, colon);
      std::optional<int> parsed = parse_positive(rest.substr(colon + 1));
      if (!parsed) {
        return item_error(item, "the virtual-stage count V in sched=NAME:V needs a positive "
                                "whole number, e.g. sched=interleaved:2");
      }
      v = *parsed;
      has_v = true;
    }
    if (!valid_sched_name(name)) {
      return item_error(item, "sched needs a schedule name (letters, digits, '_', '-', '.'), "
                              "e.g. sched=1f1b, sched=gpipe or sched=interleaved:2");
    }
    if (name == "interleaved" && !has_v) {
      return item_error(item, "interleaved needs a virtual-stage count, e.g. sched=interleaved:2");
    }
    if ((name == "gpipe" || name == "1f1b") && has_v && v != 1) {
      return item_error(item, std::string(name) + " takes no virtual-stage count; write sched=" +
                                  std::string(name) + ", or sched=interleaved:" +
                                  std::to_string(v) + " for virtual stages");
    }
    spec->sched = std::string(name);
    spec->virtual_stages = v;
    return Status::ok();
  }
  if (item.rfind("cpimpl=", 0) == 0) {
    *key = "cpimpl";
    const std::string_view name = item.substr(7);
    if (!valid_sched_name(name)) {
      return item_error(item, "cpimpl needs a context-parallel plugin's name (letters, digits, '_', "
                              "'-', '.'), e.g. cpimpl=ring or cpimpl=allgather");
    }
    spec->cp_impl = std::string(name);
    return Status::ok();
  }
  if (item.rfind("grad=", 0) == 0) {
    *key = "grad";
    const std::string_view name = item.substr(5);
    if (!valid_sched_name(name)) {
      return item_error(item, "grad needs a data plugin's name (letters, digits, '_', '-', '.'), "
                              "e.g. grad=onebit or grad=powersgd");
    }
    spec->grad = std::string(name);
    return Status::ok();
  }
  if (item.rfind("mb=", 0) == 0) {
    *key = "mb";
    std::optional<int> m = parse_positive(item.substr(3));
    if (!m) {
      return item_error(item, "mb needs a positive whole number of micro-batches, e.g. mb=8");
    }
    spec->mb = *m;
    return Status::ok();
  }
  if (item.rfind("zero", 0) == 0) {
    *key = "zero";
    std::string_view rest = item.substr(4);
    if (rest.size() != 1 || rest[0] < '0' || rest[0] > '3') {
      return item_error(item, "zero needs a ZeRO stage 0, 1, 2 or 3, e.g. zero1");
    }
    spec->zero = rest[0] - '0';
    return Status::ok();
  }
  struct Degree {
    const char* name;
    const char* example;
  };
  static constexpr Degree kDegrees[] = {
      {"tp", "tp4"}, {"pp", "pp2"}, {"dp", "dp8"}, {"ep", "ep4"}, {"cp", "cp2"}};
  for (const Degree& d : kDegrees) {
    std::string_view name = d.name;
    if (item.rfind(name, 0) != 0) continue;
    *key = std::string(name);
    std::optional<int> n = parse_positive(item.substr(name.size()));
    if (!n) {
      return item_error(item, std::string(name) + " needs a positive whole number, e.g. " +
                                  d.example);
    }
    if (name == "tp") spec->tp = *n;
    if (name == "pp") spec->pp = *n;
    if (name == "dp") spec->dp = *n;
    if (name == "ep") spec->ep = *n;
    if (name == "cp") spec->cp = *n;
    return Status::ok();
  }
  return item_error(item, "unknown item; use tpN, ppN, dpN, epN, cpN, zero0..zero3, sp, nosp, "
                          "sched=NAME[:V], cpimpl=NAME, grad=NAME or mb=M, e.g. --partrain=tp4,pp2");
}

}  // namespace

Result<ParallelSpec> overlay_spec(const ParallelSpec& base, std::string_view text) {
  ParallelSpec spec = base;
  if (trim(text).empty()) return spec;
  std::map<std::string, std::string> seen;  // key -> the item that set it
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = trim(text.substr(start, comma - start));
    if (item.empty()) {
      return Status::invalid("partrain: empty item in --partrain '" + std::string(text) +
                             "': remove the extra comma");
    }
    std::string key;
    PARTRAIN_RETURN_IF_ERROR(apply_item(item, &spec, &key));
    if (auto it = seen.find(key); it != seen.end()) {
      if (key == "sp" && it->second != item) {
        return item_error(item, "conflicts with '" + it->second + "'; keep one of sp or nosp");
      }
      return item_error(item, key + " is given twice (also '" + it->second + "'); keep one");
    }
    seen.emplace(key, std::string(item));
    start = comma + 1;
  }
  return spec;
}

Result<ParallelSpec> parse_spec(std::string_view text) {
  return overlay_spec(ParallelSpec{}, text);
}

std::string ParallelSpec::to_string() const {
  std::string out = "tp" + std::to_string(tp) + ",pp" + std::to_string(pp);
  if (dp) out += ",dp" + std::to_string(*dp);
  if (ep != 1) out += ",ep" + std::to_string(ep);
  if (cp != 1) out += ",cp" + std::to_string(cp);
  out += ",zero" + std::to_string(zero);
  if (sp) out += *sp ? ",sp" : ",nosp";
  out += ",sched=" + sched;
  if (virtual_stages != 1 || sched == "interleaved") out += ":" + std::to_string(virtual_stages);
  if (cp_impl != "ring") out += ",cpimpl=" + cp_impl;
  if (!grad.empty()) out += ",grad=" + grad;
  if (mb) out += ",mb=" + std::to_string(*mb);
  return out;
}

}  // namespace partrain
