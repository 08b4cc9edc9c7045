#pragma once
// kindling-run's command line: torchrun's option names and spellings, checked together so
// that a mistake fails before anything starts.
#include <string>
#include <vector>

#include "kindling/error.h"

namespace kindling_run {

/// The usage text (--help).
extern const char* const kUsage;

/// A command line that cannot run is refused with kindling's own error type: its what() says
/// which option, the value seen and what to do.
using kindling::UsageError;

struct Options {
  int nproc_per_node = 1;
  /// --nnodes N (min == max) or MIN:MAX.
  int min_nodes = 1;
  int max_nodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  bool prefix = true;
  double grace_seconds = 3;
  int max_restarts = 0;
  std::string run_id;  // empty: a new unique one
  /// Elastic mode (--nnodes MIN:MAX, or --rdzv_endpoint with the c10d backend): the node
  /// ranks and the world come from rendezvous rounds between the agents.
  bool elastic = false;
  std::string rdzv_host;
  int rdzv_port = 29400;
  /// --rdzv_backend etcd: the members of the etcd cluster, "host:port" (rdzv_host: the first).
  std::vector<std::string> etcd_endpoints;
  /// --live_recovery: rounds are joined with the workers running (elastic only).
  bool live_recovery = false;
  /// --warm_join: the workers start before the node joins (live recovery only).
  bool warm_join = false;
  /// --rdzv_conf's settings as given, checked (several --rdzv_conf join with commas; a later
  /// setting wins).
  std::string rdzv_conf;
  bool addr_given = false, port_given = false, node_rank_given = false;
  std::vector<std::string> program;
};

/// Parses argv (prints kUsage and exits 0 for -h / --help). Throws UsageError.
Options parse(int argc, char** argv);

/// What kindling-run prints on stderr for a bad command line: kUsage's first line with a
/// pointer to --help, then `error`'s what() last, where the terminal leaves it in view.
std::string usage_error_text(const UsageError& error);

}  // namespace kindling_run
