#pragma once
// The main() of a kindling example that trains on several ranks: run `fn(local_rank, options)`
// under kd::Parallel, starting 2 processes itself when no launcher started this one (and the
// backend is not serial), and turn what escapes into kindling-run's exit codes with a line on
// stderr. For examples/ (kindling-run's own command line, cli.h, does not load LibTorch).
#include <iostream>
#include <optional>
#include <string>

#include <kindling/dist/launch_env.h>
#include <kindling/dist/parallel.h>
#include <kindling/error.h>

namespace kindling {
namespace cli {

/// Runs `fn` on every rank of `backend` (`nproc_per_node` processes when given, else 2 started
/// here, or those a launcher started); returns the process's exit code: 0, a LaunchError's code
/// (a worker failed or was killed, or the run was interrupted), or 1 for any other error, each
/// told on stderr as "<program>: error: ...".
template <typename Fn, typename Options>
int run_workers(const char* program, const std::string& backend, std::optional<int> nproc_per_node, Fn fn,
                const Options& options) {
  try {
    kindling::dist::ParallelOptions parallel_options(backend);
    if (nproc_per_node) {
      parallel_options.nproc_per_node(*nproc_per_node);
    } else if (backend != "serial" && !kindling::dist::detect_launch_environment().detected()) {
      parallel_options.nproc_per_node(2);
    }
    kindling::dist::Parallel parallel(parallel_options);
    parallel.run(fn, options);
  } catch (const kindling::LaunchError& e) {
    std::cerr << program << ": error: " << e.what() << std::endl;
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}

}  // namespace cli
}  // namespace kindling
