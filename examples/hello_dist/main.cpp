// hello_dist: every rank prints one line and exits 0.
//
//   export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500
//   RANK=0 ./hello_dist & RANK=1 ./hello_dist; wait
// prints (in some order)
//   rank=0 local_rank=0 world_size=2 backend=gloo all_reduce=3
//   rank=1 local_rank=1 world_size=2 backend=gloo all_reduce=3
#include <kindling/kindling.h>

#include "cli/cli.h"

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  std::string backend;
  CLI::App app{"Every rank prints one line: its rank, the world size and an all_reduce of rank + 1.", "hello_dist"};
  app.add_option("--backend", backend,
                 "serial, gloo, nccl or mpi (default: gloo when a launcher started several processes, else serial)");
  bool layout = false;
  app.add_flag("--layout", layout,
               "Also print the node layout: nnodes, node_rank, nproc_per_node and the host name");
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    // Default: gloo when a launcher (kindling-run, torchrun, mpirun, srun, ...) started
    // several processes, serial otherwise.
    if (backend.empty()) backend = kindling::dist::detect_launch_environment().world_size > 1 ? "gloo" : "serial";
    kindling::dist::initialize(backend);
    const int rank = kindling::dist::get_rank();
    const auto sum = kindling::dist::all_reduce(static_cast<int64_t>(rank + 1));
    std::cout << "rank=" << rank << " local_rank=" << kindling::dist::get_local_rank()
              << " world_size=" << kindling::dist::get_world_size() << " backend=" << kindling::dist::backend()
              << " all_reduce=" << sum;
    if (layout) {
      std::cout << " nnodes=" << kindling::dist::get_nnodes() << " node_rank=" << kindling::dist::get_node_rank()
                << " nproc_per_node=" << kindling::dist::get_nproc_per_node() << " host=" << kindling::dist::hostname();
    }
    std::cout << std::endl;
    kindling::dist::finalize();
  } catch (const kindling::Error& e) {
    std::cerr << "hello_dist: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
