// Command lines of the real launchers, shared by the launcher tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace kindling {
namespace testing {

/// torchrun from Debian's python3-torch (through tests/launch/torchrun_compat.py, which
/// makes its monitor interval settable) followed by `args`.
inline std::vector<std::string> torchrun(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {KINDLING_PYTHON, std::string(KINDLING_SOURCE_DIR) + "/tests/launch/torchrun_compat.py",
                                   "--monitor_interval", "0.2"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

/// The environment mpirun needs when the tests run as root (Open MPI refuses root otherwise).
inline std::map<std::string, std::string> mpirun_env() {
  return {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
}

/// The environment srun and sbatch need: SLURM_CONF of the cluster the CTest fixture started.
inline std::map<std::string, std::string> slurm_env() {
  const char* conf = std::getenv("SLURM_CONF");
  if (conf == nullptr) ADD_FAILURE() << "SLURM_CONF is not set: run through CTest, whose fixture starts Slurm";
  return {{"SLURM_CONF", conf ? conf : ""}};
}

}  // namespace testing
}  // namespace kindling
