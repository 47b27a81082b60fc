// cli/values.h — what a command-line value must look like, for every option of `mxtrain`.
//
// Integers are decimal digits with an optional leading minus (`0x10`, `1e3`, `+5` and
// `1 000` are refused), within the option's range and the variable's type: a value out of
// range is an error, never clamped. Other numbers must be finite. No value may be an empty
// string. strict_values() gives every option of the program the checks its type needs
// (main.cc calls it once, after the commands are set up); an option's own range is declared
// beside it with whole_number() or number_at_least(). A value that fails is a CLI11
// validation error, which main.cc reports as one `error:` line with exit code 1.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <limits>

namespace mxtrain::cli {

// A decimal integer in [min, max].
CLI::Validator whole_number(int64_t min, int64_t max = std::numeric_limits<int64_t>::max());
// A decimal integer in [0, 2^64 - 1] (seeds).
CLI::Validator unsigned_number();
// A finite number >= min (or > min when `exclusive`).
CLI::Validator number_at_least(double min, bool exclusive = false);

// Adds to every option of `app` and its subcommands that takes a value: not empty, and by
// the variable's type, a decimal integer that fits it (INT, UINT) or a finite number (FLOAT).
void strict_values(CLI::App& app);

}  // namespace mxtrain::cli
