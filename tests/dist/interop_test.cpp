// A kindling rank and a Python torch.distributed rank (Debian's python3-torch, gloo) form one
// job and all_reduce together, with either side as rank 0 hosting the store, over env://
// and tcp://.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <kindling/kindling.h>

#include <cstdlib>
#include <iostream>

#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

KINDLING_WORKER(interop_cpp) {
  const std::string mode = std::getenv("KINDLING_INTEROP_MODE");
  const int rank = std::atoi(std::getenv("KINDLING_TEST_RANK"));
  const int ws = std::atoi(std::getenv("KINDLING_TEST_WORLD_SIZE"));
  auto opts = kd::InitOptions().timeout(std::chrono::seconds(60));
  if (mode == "tcp") {
    opts.init_method(std::string("tcp://127.0.0.1:") + std::getenv("KINDLING_TEST_PORT")).rank(rank).world_size(ws);
    kd::set_local_rank(rank);
  }
  kd::initialize("gloo", opts);
  auto t = at::full({4}, static_cast<float>(rank + 1));
  kd::all_reduce(t);
  std::cout << "kindling rank " << rank << ": all_reduce=" << t[0].item<float>() << std::endl;
  WCHECK(at::equal(t, at::full({4}, static_cast<float>(ws * (ws + 1) / 2))), << t);
  auto b = at::zeros({3}, at::kLong);
  if (rank == 0) b += 7;
  kd::broadcast(b, 0);
  WCHECK(at::equal(b, at::full({3}, 7, at::kLong)), << b);
  kd::finalize();
}

struct InteropCase {
  const char* mode;
  int python_rank;
};

class PythonInteropTest : public ::testing::TestWithParam<InteropCase> {};

TEST_P(PythonInteropTest, KindlingAndPythonRanksAllReduceTogether) {
  const auto c = GetParam();
  LaunchOptions opts;
  opts.world_size = 2;
  opts.deadline = std::chrono::seconds(90);
  opts.set_dist_env = std::string(c.mode) == "env";
  opts.env = {{"KINDLING_INTEROP_MODE", c.mode}, {"LOCAL_WORLD_SIZE", "2"}};
  opts.commands[c.python_rank] = {KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/python/interop_peer.py", c.mode};
  auto results = run_workers("interop_cpp", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
  EXPECT_NE(results[c.python_rank].out.find("all_reduce=[3.0, 3.0, 3.0, 3.0]"), std::string::npos) << describe(results);
  EXPECT_NE(results[1 - c.python_rank].out.find("all_reduce=3"), std::string::npos) << describe(results);
}

INSTANTIATE_TEST_SUITE_P(BothRolesBothInitMethods, PythonInteropTest,
                         ::testing::Values(InteropCase{"env", 0}, InteropCase{"env", 1}, InteropCase{"tcp", 0},
                                           InteropCase{"tcp", 1}),
                         [](const ::testing::TestParamInfo<InteropCase>& info) {
                           return std::string(info.param.mode) + "_python_rank" +
                                  std::to_string(info.param.python_rank);
                         });

// The mixed job of issue 15: kindling ranks started with RANK / LOCAL_RANK / WORLD_SIZE but
// no LOCAL_WORLD_SIZE, rank 0 a plain torch.distributed program. initialize() must learn
// the node layout through the store, not with a collective of its own, or the Python rank's
// first all_reduce would be matched against it (it then returned 4 instead of 6).
TEST(PythonInterop, MixedJobWithoutLocalWorldSizeIsNotDesynchronised) {
  LaunchOptions opts;
  opts.world_size = 3;
  opts.deadline = std::chrono::seconds(90);
  opts.env = {{"KINDLING_INTEROP_MODE", "env"}, {"LOCAL_WORLD_SIZE", ""}};
  opts.commands[0] = {KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/python/interop_peer.py", "env"};
  auto results = run_workers("interop_cpp", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
  EXPECT_NE(results[0].out.find("all_reduce=[6.0, 6.0, 6.0, 6.0]"), std::string::npos) << describe(results);
  for (int r : {1, 2}) EXPECT_NE(results[r].out.find("all_reduce=6"), std::string::npos) << describe(results);
}
