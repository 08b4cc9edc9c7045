// kindling-run's elastic rendezvous when it cannot work: a port another program holds, a host
// name that does not resolve (each said at once, with its cause, instead of waiting for the
// join timeout, 60 s here), and a refusal that no restart can change (not retried again).
#include <gtest/gtest.h>

#include <string>

#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "support/multiprocess.h"
#include "support/silent_port.h"
#include "support/terminal.h"

namespace {

using kindling::testing::run_command;

const std::string kRun = KINDLING_RUN_PATH;

std::string show(const kindling::testing::RankResult& r) {
  return "exit " + std::to_string(r.exit_code) + " after " + std::to_string(r.seconds) + " s\n" + r.err;
}

}  // namespace

TEST(KindlingRunEndpoint, APortHeldByAnotherProgramIsNamedAtOnce) {
  const kindling::testing::SilentPort stranger;
  const std::string endpoint = "127.0.0.1:" + std::to_string(stranger.port());
  const auto r = run_command({kRun, "--nnodes", "1:2", "--rdzv_endpoint", endpoint, "--rdzv_id", "held", "--rdzv_conf",
                              "join_timeout=60", "/bin/true"},
                             {}, std::chrono::seconds(50));
  EXPECT_NE(r.exit_code, 0) << show(r);
  EXPECT_LT(r.seconds, 15.0) << show(r);
  EXPECT_NE(r.err.find("the program listening at " + endpoint +
                       " is not a kindling-run rendezvous (it said nothing within 5 s); this host could not listen "
                       "there either (Address already in use). Another program holds the port"),
            std::string::npos)
      << show(r);
}

TEST(KindlingRunEndpoint, AHostNameThatDoesNotResolveIsRefusedAtOnce) {
  const auto r = run_command({kRun, "--nnodes", "1:2", "--rdzv_endpoint", "no-such-host.invalid:29400", "--rdzv_id",
                              "nowhere", "--rdzv_conf", "join_timeout=60", "/bin/true"},
                             {}, std::chrono::seconds(50));
  EXPECT_NE(r.exit_code, 0) << show(r);
  EXPECT_LT(r.seconds, 10.0) << show(r);
  EXPECT_NE(r.err.find("the endpoint host 'no-such-host.invalid' does not resolve to an address"), std::string::npos)
      << show(r);
}

// A worker refused the same way in every attempt (as a global batch that the world size does
// not divide): after the second identical refusal by the same nodes, no further restart.
KINDLING_WORKER(refused_each_time) {
  const kindling::UsageError refusal("the global batch 10 does not divide over 3 ranks");
  kindling::dist::record_error(refusal);
  throw refusal;
}

TEST(KindlingRunEndpoint, ARefusalMetTwiceIsNotRetriedAgain) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(kindling::testing::free_port());
  const auto r =
      run_command({kRun, "--nnodes", "1:1", "--rdzv_endpoint", endpoint, "--max_restarts", "5", "--nproc_per_node", "1",
                   kindling::testing::self_path(), "--kindling-worker=refused_each_time"},
                  {}, std::chrono::seconds(50));
  EXPECT_NE(r.exit_code, 0) << show(r);
  EXPECT_NE(r.err.find("refused twice in a row the same way with the same 1 node(s), so a restart cannot succeed"),
            std::string::npos)
      << show(r);
  EXPECT_NE(r.err.find("kindling::UsageError: the global batch 10 does not divide over 3 ranks"), std::string::npos)
      << show(r);
  EXPECT_NE(r.err.find("(restarts made 1 of 5)"), std::string::npos) << show(r);
}
