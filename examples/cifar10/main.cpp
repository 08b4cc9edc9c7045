// cifar10: the PyTorch-Ignite "Distributed Training with Ignite on CIFAR10" tutorial in C++
// on kindling, line for line: ResNet18 trained data-parallel with Accuracy and Loss on the
// train and test sets, the two best models kept, a warm-up + decay learning rate, a
// progress bar, TensorBoard logs (and an HTML report), resume_from and stop_iteration; the
// same program on one process or many, under Parallel, kindling-run, torchrun, mpirun or srun.
//
//   cifar10 --nproc_per_node 2                       # 2 processes, gloo, Debian's Fashion-MNIST
//   cifar10 --data_path /data/cifar10 --nproc_per_node 2 --backend gloo
//   kindling-run --nproc_per_node 2 cifar10 --backend gloo
//   mpirun -np 2 cifar10 --backend mpi
//   cifar10 --nproc_per_node 2 --resume_from output-cifar10/<run>/training_checkpoint_400.pt
#include <kindling/dist/launch_env.h>
#include <kindling/dist/parallel.h>
#include <kindling/error.h>

#include <iostream>

#include "config.h"
#include "training.h"

int main(int argc, char** argv) {
  cifar10::Config config;
  if (const int rc = cifar10::parse_command_line(argc, argv, config); rc >= 0) return rc;
  namespace kd = kindling::dist;
  try {
    // The tutorial's Parallel(backend, nproc_per_node). Without --backend: gloo when more than
    // one process will run (started here or by a launcher), else no distribution.
    const bool launcher = kd::detect_launch_environment().detected();
    if (config.backend.empty()) {
      config.backend = (config.nproc_per_node.value_or(1) > 1 || launcher) ? "gloo" : "none";
    }
    if (config.backend == "none" && config.nproc_per_node.value_or(1) > 1) {
      std::cerr << "cifar10: error: --nproc_per_node " << *config.nproc_per_node
                << " starts several processes, which need a backend; add --backend gloo (or mpi, nccl)\n";
      return 2;
    }
    const std::string backend = config.backend == "none" ? "serial" : config.backend;
    kd::ParallelOptions options(backend);
    // Under a launcher too: Parallel refuses a count that contradicts the launcher's (or
    // RANK / WORLD_SIZE left in a shell).
    if (config.nproc_per_node && backend != "serial") options.nproc_per_node(*config.nproc_per_node);
    options.timeout(std::chrono::seconds(config.collective_timeout_s));
    if (config.stall_timeout_s)
      options.stall_timeout(std::chrono::milliseconds(static_cast<int64_t>(*config.stall_timeout_s * 1000)));
    if (config.nproc_per_node && !launcher && backend != "serial") options.max_restarts(config.max_restarts);
    kd::Parallel parallel(options);
    parallel.run(cifar10::training, config);
  } catch (const kindling::LaunchError& e) {
    // A worker failed or was killed, or this launcher was interrupted: kindling-run's codes.
    std::cerr << "cifar10: error: " << e.what() << std::endl;
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "cifar10: error: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
