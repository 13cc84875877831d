// "Did you mean": the known name closest to a mistyped one, for TOML keys and tables
// (config/key_table) and the command line's commands and options (cli/suggest).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace partrain {

// Levenshtein distance: single-character insertions, deletions and substitutions.
size_t edit_distance(const std::string& a, const std::string& b);

// The nearest of `candidates` to `word`, or "" when none is close enough to suggest: a typo
// (distance at most max(2, |word| / 3)) or one is the other with a prefix or suffix
// ("lr_max" for "lr"). E.g. nearest("rnu", {"run", "plan"}) == "run".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace partrain
