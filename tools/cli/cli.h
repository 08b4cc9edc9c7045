#pragma once
// Command-line handling shared by kindling's example and benchmark programs, on CLI11
// (Debian's libcli11-dev): --help prints the help on stdout and exits 0; a bad value, a
// missing value or an unknown flag prints "<program>: error: <what>" and a hint on stderr
// and exits 2. Each program spells its flags: --words-with-dashes in the benchmarks and the
// smaller examples, the tutorial's own config names (--nproc_per_node, --data_path) in
// examples/cifar10, as ignite's tutorial spells them. (kindling-run keeps its own parser:
// it follows torchrun's spellings and stops at the program's own arguments.)
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

namespace kindling {
namespace cli {

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
