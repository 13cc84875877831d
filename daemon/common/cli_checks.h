// Number checks for the command lines of partrain and partraind. CLI11's own
// PositiveNumber and NonNegativeNumber state their range when they refuse a value, and the
// range ends at the largest double, so "--steps 0" printed a 300-digit number; these say
// what is wanted in words: "--steps: must be a number above 0, not 0".
// Header only (CLI11 is header only too); the one place partrain depends on CLI11 outside
// its two main programs.
#pragma once

#include <cmath>
#include <string>

#include <CLI/CLI.hpp>

namespace partrain::cli_checks {

namespace detail {
inline CLI::Validator number_check(bool zero_allowed, const char* wanted, const char* name) {
  return CLI::Validator(
      [zero_allowed, wanted](std::string& text) -> std::string {
        double v = 0;
        const bool number = CLI::detail::lexical_cast(text, v) && std::isfinite(v);
        if (number && (v > 0 || (zero_allowed && v == 0))) return "";
        return std::string("must be ") + wanted + ", not " + text;
      },
      "", name);
}
}  // namespace detail

// > 0: counts, seconds, steps.
inline const CLI::Validator kPositive = detail::number_check(false, "a number above 0", "POSITIVE");
// >= 0: steps of a checkpoint, offsets.
inline const CLI::Validator kNonNegative = detail::number_check(true, "0 or a number above it", "NONNEGATIVE");

}  // namespace partrain::cli_checks
