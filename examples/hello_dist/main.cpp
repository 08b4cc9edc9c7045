// hello_dist: every rank prints one line and exits 0.
//
//   export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500
//   RANK=0 ./hello_dist & RANK=1 ./hello_dist; wait
// prints (in some order)
//   rank=0 local_rank=0 world_size=2 backend=gloo all_reduce=3
//   rank=1 local_rank=1 world_size=2 backend=gloo all_reduce=3
#include <kindling/kindling.h>

#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  std::string backend;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--backend" && i + 1 < argc) {
      backend = argv[++i];
    } else if (arg.rfind("--backend=", 0) == 0) {
      backend = arg.substr(10);
    } else {
      std::cerr << "usage: hello_dist [--backend serial|gloo|...]\n";
      return 2;
    }
  }
  try {
    // Default: gloo when a launcher (kindling-run, torchrun, mpirun, srun, ...) started
    // several processes, serial otherwise.
    if (backend.empty()) backend = kindling::dist::detect_launch_environment().world_size > 1 ? "gloo" : "serial";
    kindling::dist::initialize(backend);
    const int rank = kindling::dist::get_rank();
    const auto sum = kindling::dist::all_reduce(static_cast<int64_t>(rank + 1));
    std::cout << "rank=" << rank << " local_rank=" << kindling::dist::get_local_rank()
              << " world_size=" << kindling::dist::get_world_size() << " backend=" << kindling::dist::backend()
              << " all_reduce=" << sum << std::endl;
    kindling::dist::finalize();
  } catch (const kindling::Error& e) {
    std::cerr << "hello_dist: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
