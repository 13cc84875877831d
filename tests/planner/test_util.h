// Helpers the planner's command-line tests share: walk the JSON that `partrain plan` /
// `report` print; running a command and reading a file come from tests/test_util.h.
#pragma once

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "../test_util.h"
#include "engine/io/json.h"

namespace partrain::planner::testing {

using engine::io::JsonValue;
using partrain::testing::sh;
using partrain::testing::slurp;

// Member `key` of an object; a test failure (and a null value) when it is missing.
inline const JsonValue& at(const JsonValue& v, const std::string& key) {
  for (const auto& [k, m] : v.members) {
    if (k == key) return m;
  }
  static const JsonValue kNone;
  ADD_FAILURE() << "no key " << key;
  return kNone;
}

// The number at a dotted path, e.g. "memory.engine_total".
inline double number(const JsonValue& v, const std::string& path) {
  const JsonValue* here = &v;
  std::istringstream parts(path);
  for (std::string key; std::getline(parts, key, '.');) here = &at(*here, key);
  return here->kind == JsonValue::Kind::kNumber ? std::stod(here->text) : 0;
}

}  // namespace partrain::planner::testing
