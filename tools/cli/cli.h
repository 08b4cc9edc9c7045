#pragma once
// Command-line handling shared by kindling's example and benchmark programs, on CLI11
// (Debian's libcli11-dev): --help prints the help on stdout and exits 0; a bad value, a
// missing value or an unknown flag prints "<program>: error: <what>" and a hint on stderr
// and exits 2. Each program spells its flags: --words-with-dashes in the benchmarks and the
// smaller examples, the tutorial's own config names (--nproc_per_node, --data_path) in
// examples/cifar10, as ignite's tutorial spells them. Number options are checked with
// finite_number(), which refuses NaN and infinities and names the value as written. (kindling-run
// keeps its own parser: it follows torchrun's spellings and stops at the program's own arguments.)
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>

namespace kindling {
namespace cli {

/// What a number option accepts, for finite_number(): from `lo` to `hi` (above `lo` when
/// `lo_excluded`), in `unit` ("seconds"; empty for a plain number), with an optional `note`
/// for the message ("0 turns stall detection off").
struct NumberRange {
  double lo = 0;
  double hi = std::numeric_limits<double>::max();
  bool lo_excluded = false;
  std::string unit;
  std::string note;
};

/// A finite number above 0 (a learning rate); NumberRange{} is one of at least 0.
inline const NumberRange kPositiveNumber{0, std::numeric_limits<double>::max(), true, "", ""};

/// --stall_timeout of the examples: seconds from 0 (off) to 1e7 (about 115 days), the range
/// of the environment's KINDLING_STALL_TIMEOUT.
inline const NumberRange kStallTimeoutSeconds{0, 1e7, false, "seconds", "0 turns stall detection off"};

namespace detail {

/// `v` as a person writes it: 10000000 rather than 1e+07; 0.5; 1e-08.
inline std::string number_text(double v) {
  if (std::abs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<long long>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

/// What `r` accepts, in words: "a number of seconds from 0 to 10000000 (0 turns ... off)",
/// "a finite number above 0".
inline std::string expected_text(const NumberRange& r) {
  std::string text = r.unit.empty() ? "a number" : "a number of " + r.unit;
  const std::string lo = number_text(r.lo);
  if (r.hi == std::numeric_limits<double>::max()) {
    text = (r.unit.empty() ? "a finite number" : "a finite number of " + r.unit) +
           (r.lo_excluded ? " above " + lo : " of at least " + lo);
  } else {
    text += (r.lo_excluded ? " above " + lo + " and at most " : " from " + lo + " to ") + number_text(r.hi);
  }
  return r.note.empty() ? text : text + " (" + r.note + ")";
}

}  // namespace detail

/// A CLI11 check for a number option: a value that is not a number, NaN, an infinity or
/// outside `range` is refused with "<option>: got '<the value as written>'; expected <what
/// `range` accepts>". (CLI11's Range, PositiveNumber and NonNegativeNumber let NaN through
/// and print the largest double in 309 digits as their bound.)
inline CLI::Validator finite_number(const NumberRange& range) {
  const std::string expected = detail::expected_text(range);
  const std::string lo = detail::number_text(range.lo);
  const bool unbounded = range.hi == std::numeric_limits<double>::max();
  const std::string description =
      unbounded ? (range.lo_excluded ? "> " : ">= ") + lo
                : (range.lo_excluded ? "> " + lo + ", <= " : lo + " to ") + detail::number_text(range.hi);
  return CLI::Validator(
      [range, expected](std::string& input) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(input.c_str(), &end);
        const bool parsed = !input.empty() && end == input.c_str() + input.size();
        const bool above = range.lo_excluded ? v > range.lo : v >= range.lo;
        if (parsed && std::isfinite(v) && above && v <= range.hi) return {};
        return "got '" + input + "'; expected " + expected;
      },
      description + (range.unit.empty() ? "" : " " + range.unit));
}

/// Parses argv into `app`'s bindings. Returns -1 when the program should go on, else the
/// exit code main should return (0 after --help, 2 after a usage error).
inline int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse <key>" for a key that names no option.
    std::string what = e.what();
    const std::string extra = "INI was not able to parse ";
    if (what.rfind(extra, 0) == 0)
      what = "the configuration file (--config) sets '" + what.substr(extra.size()) + "', which is not an option of " +
             app.get_name() + " (misspelt?); remove it or use a name from --help";
    std::cerr << app.get_name() << ": error: " << what << "\nRun " << app.get_name() << " --help for the options.\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": error: " << e.what() << "\nRun " << app.get_name()
              << " --help for the options.\n";
    return 2;
  }
}

}  // namespace cli
}  // namespace kindling
