#pragma once
// A parameterized test that runs one worker (KINDLING_WORKER) on each (backend, world size) of
// its parameter, as cpu_backend_world_sizes() lists them, and expects every rank to end well.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <tuple>

#include "support/multiprocess.h"

namespace kindling {
namespace testing {

class BackendWorldTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  /// Runs `worker` on the parameter's backend and world size, with `env` added to the ranks'
  /// environment; a rank that fails, or any still running after `deadline`, fails the test.
  void expect_ok(const std::string& worker, const std::map<std::string, std::string>& env = {},
                 std::chrono::seconds deadline = std::chrono::seconds(120)) {
    LaunchOptions opts;
    opts.backend = std::get<0>(GetParam());
    opts.world_size = std::get<1>(GetParam());
    opts.deadline = deadline;
    opts.env = env;
    auto results = run_workers(worker, opts);
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
  }
};

}  // namespace testing
}  // namespace kindling
