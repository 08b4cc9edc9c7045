// kindling-run's elastic rendezvous when it cannot work: a port another program holds, a host
// name that does not resolve (each said at once, with its cause, instead of waiting for the
// join timeout, 60 s here), and a refusal that no restart can change (not retried again). Under
// --live_recovery: a program that does not take part, and a node whose replica diverged, which
// leaves while the others go on.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "kindling/dist/auto.h"
#include "kindling/dist/dist.h"
#include "kindling/dist/launch_env.h"
#include "kindling/dist/replica_check.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/live_recovery.h"
#include "kindling/handlers/replica_check.h"
#include "support/files.h"
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

// A DNS server that does not answer (a temporary failure: EAI_AGAIN), made in a network and
// mount namespace of the test's own: /etc/resolv.conf names 10.250.77.2, an address behind a
// veth pair whose far end answers nothing (the queries are dropped). The endpoint's name is
// tried again for 30 s, as MASTER_ADDR is, then refused, instead of waiting the join timeout
// (90 s here); the same for the members of an etcd cluster.
TEST(KindlingRunEndpoint, ADnsServerThatDoesNotAnswerEndsTheWaitAfter30s) {
  const std::string setup =
      "set -e; d=$(mktemp -d); trap 'rm -rf $d' EXIT; printf 'nameserver 10.250.77.2\\noptions timeout:1 "
      "attempts:1\\n' > $d/resolv.conf; mount --bind $d/resolv.conf /etc/resolv.conf; ip link set lo up; "
      "ip link add v0 type veth peer name v1; ip addr add 10.250.77.1/24 dev v0; ip link set v0 up; "
      "ip link set v1 up; set +e; ";
  const std::string agent = kRun + " --nnodes 1:2 --rdzv_id dns --rdzv_conf join_timeout=90 ";
  const std::string body = agent + "--rdzv_endpoint rdzv.kindling.test:29400 /bin/true & a=$!; " + agent +
                           "--rdzv_backend etcd --rdzv_endpoint etcd1.kindling.test,etcd2.kindling.test:2380 "
                           "/bin/true; echo etcd_exit=$?; wait $a; echo c10d_exit=$?";
  if (run_command({"/usr/bin/unshare", "--net", "--mount", "/bin/sh", "-c", setup + "true"}).exit_code != 0)
    GTEST_SKIP() << "no network and mount namespaces here (unshare --net --mount needs root)";
  const auto r = run_command({"/usr/bin/unshare", "--net", "--mount", "/bin/sh", "-c", setup + body}, {},
                             std::chrono::seconds(120));
  EXPECT_NE(r.out.find("etcd_exit=1"), std::string::npos) << show(r) << r.out;
  EXPECT_NE(r.out.find("c10d_exit=1"), std::string::npos) << show(r) << r.out;
  EXPECT_LT(r.seconds, 60.0) << show(r);
  EXPECT_NE(r.err.find("cannot resolve 'rdzv.kindling.test' yet (Temporary failure in name resolution); trying "
                       "again for up to 30 s"),
            std::string::npos)
      << show(r);
  EXPECT_NE(r.err.find("the endpoint host 'rdzv.kindling.test' could not be resolved for 30 s (Temporary failure "
                       "in name resolution): this host's DNS server does not answer. Give --rdzv_endpoint an IP "
                       "address, or check this host's resolver (/etc/resolv.conf)"),
            std::string::npos)
      << show(r);
  EXPECT_NE(r.err.find("'etcd1.kindling.test' could not be resolved for 30 s"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("'etcd2.kindling.test' could not be resolved for 30 s"), std::string::npos) << show(r);
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

// --live_recovery with a program that does not use LiveRecovery (issue 62): node 1's agent is
// lost mid-training (its worker kills it: SIGKILL, the worker follows it), while node 0's worker
// sits between collectives. Node 0's agent keeps its worker through the new round; the worker,
// which cannot make that round's world, fails at its next collective, and the agent says once
// that the program does not take part (the loss cost two restarts), then the job completes.
// Node 0 serves the rendezvous (node 1 starts a second later).
KINDLING_WORKER(live_without_taking_part) {
  kindling::dist::initialize("gloo");
  const bool pair = kindling::dist::get_world_size() == 2;
  for (int i = 0; i < 4; ++i) {
    kindling::dist::barrier();
    if (std::getenv("KINDLING_TEST_KILL_AGENT") != nullptr) {
      ::kill(::getppid(), SIGKILL);
      std::this_thread::sleep_for(std::chrono::seconds(30));  // ended by its agent's death
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(pair ? 4000 : 10));
  }
  kindling::dist::finalize();
}

TEST(KindlingRunLive, AProgramWithoutLiveRecoveryIsToldOnceThatItDoesNotTakePart) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(kindling::testing::free_port());
  kindling::testing::LaunchOptions o;
  o.world_size = 2;
  o.set_dist_env = false;
  o.deadline = std::chrono::seconds(60);
  o.rank_env[1] = {{"KINDLING_TEST_KILL_AGENT", "1"}};
  const kindling::testing::TempDir tmp("nolive");  // what the killed agent leaves goes with it
  o.env["TMPDIR"] = tmp.path();
  for (int node = 0; node < 2; ++node) {
    const std::string run = std::string(node == 1 ? "sleep 1; " : "") + "exec " + kRun +
                            " --nnodes 1:2 --rdzv_endpoint " + endpoint +
                            " --rdzv_id nolive --rdzv_conf last_call_timeout=5 --max_restarts 3 --live_recovery "
                            "--nproc_per_node 1 " + kindling::testing::self_path() +
                            " --kindling-worker=live_without_taking_part";
    o.commands[node] = {"/bin/sh", "-c", run};
  }
  const auto results = kindling::testing::run_workers("", o);
  const auto& node0 = results[0];
  EXPECT_EQ(node0.exit_code, 0) << show(node0);
  const std::string said = "the program does not take part in live recovery";
  const auto first = node0.err.find(said);
  EXPECT_NE(first, std::string::npos) << show(node0);
  EXPECT_EQ(node0.err.find(said, first + 1), std::string::npos) << "said more than once\n" << show(node0);
  EXPECT_NE(node0.err.find("each lost node costs two restarts"), std::string::npos) << show(node0);
}

// kindling-run --warm_join: started before its node joined, the worker has no RANK; its
// initialize() waits for the round, which the node joins only then.
KINDLING_WORKER(warm_standby) {
  WCHECK(std::getenv("RANK") == nullptr, "a standby worker was given RANK=", std::getenv("RANK"));
  kindling::dist::initialize("gloo");
  std::printf("WARM rank=%d world=%d\n", kindling::dist::get_rank(), kindling::dist::get_world_size());
  std::fflush(stdout);
  kindling::dist::barrier();
  kindling::dist::finalize();
}

TEST(KindlingRunLive, WarmJoinStartsTheWorkersFirstAndNamesAProgramThatEndsBeforeItInitializes) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(kindling::testing::free_port());
  const std::vector<std::string> warm{kRun,           "--nnodes",      "1:1", "--rdzv_endpoint", endpoint, "--rdzv_id",
                                      "warm",         "--live_recovery", "--warm_join", "--nproc_per_node", "2"};
  auto argv = warm;
  argv.insert(argv.end(), {kindling::testing::self_path(), "--kindling-worker=warm_standby"});
  const auto r = run_command(argv, {}, std::chrono::seconds(60));
  EXPECT_EQ(r.exit_code, 0) << show(r) << r.out;
  EXPECT_NE(r.out.find("WARM rank=0 world=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("WARM rank=1 world=2"), std::string::npos) << r.out;
  const auto waited = r.err.find("waiting for the round"), joined = r.err.find("rendezvous round 0");
  EXPECT_NE(waited, std::string::npos) << show(r);
  EXPECT_LT(waited, joined) << "the node joined before its workers waited\n" << show(r);

  argv = warm;
  argv.push_back("/bin/true");  // never initializes
  const auto ended = run_command(argv, {}, std::chrono::seconds(60));
  EXPECT_EQ(ended.exit_code, 1) << show(ended);
  EXPECT_NE(ended.err.find("the workers ended before this node joined a round (--warm_join"), std::string::npos)
      << show(ended);
}

// Every rank meets the same refusal (as a global batch that the new world size does not
// divide), named with its rank as kindling's checks do; which rank fails first changes from one
// attempt to the next (here it alternates: the other rank is stopped before it fails). The
// refusal is the same, so the job ends after meeting it twice rather than at --max_restarts.
KINDLING_WORKER(refused_by_turns) {
  const int rank = std::atoi(std::getenv("RANK"));
  const int attempt = std::atoi(std::getenv("TORCHELASTIC_RESTART_COUNT"));
  if (rank != attempt % 2) std::this_thread::sleep_for(std::chrono::seconds(4));
  const kindling::UsageError refusal("[rank " + std::to_string(rank) +
                                     "/2] Engine::run: 36 samples are not a whole number of iterations of 8 samples");
  kindling::dist::record_error(refusal);
  throw refusal;
}

TEST(KindlingRunEndpoint, ARefusalMetTwiceOnAnyRankIsNotRetriedAgain) {
  const std::string agent = kRun + " --nnodes 2 --rdzv_endpoint 127.0.0.1:" +
                            std::to_string(kindling::testing::free_port()) +
                            " --rdzv_id by-turns --max_restarts 5 --grace_period 1 " + kindling::testing::self_path() +
                            " --kindling-worker=refused_by_turns";
  const auto r = run_command({"/bin/sh", "-c", agent + " & a=$!; " + agent + "; b=$?; wait $a; echo exit=$?,$b"}, {},
                             std::chrono::seconds(90));
  EXPECT_EQ(r.out.find("exit=0"), std::string::npos) << show(r) << r.out;
  EXPECT_NE(r.err.find("refused twice in a row the same way with the same 2 node(s), so a restart cannot succeed"),
            std::string::npos)
      << show(r);
  EXPECT_NE(r.err.find("(restarts made 1 of 5)"), std::string::npos) << show(r);
  EXPECT_EQ(r.err.find("rendezvous round 3"), std::string::npos) << show(r);
}

namespace {

// Under --live_recovery, 3 nodes of one rank each (issue 64): the rank that is rank 2 in the
// first world flips a bit of its weight after iteration 7; the ReplicaCheck of iteration 10
// names it on every rank; its node leaves the job (LiveRecovery: kindling::dist::leave_job) and
// the other two go on at world size 2 from their last commit (iteration 9) to iteration 40.
KINDLING_WORKER(live_replica_diverges) {
  namespace kd = kindling::dist;
  namespace ke = kindling::engine;
  namespace kh = kindling::handlers;
  const bool flips = std::string(std::getenv("RANK")) == "2";
  kh::LiveRecovery live(kh::LiveRecoveryOptions().init_options(kd::InitOptions().timeout(std::chrono::seconds(30))));
  at::manual_seed(0);
  torch::nn::Linear net(4, 1);
  live.run([&](kh::LiveRecovery& self) {
    auto model = kd::auto_model(net);
    torch::optim::SGD optimizer(model->parameters(), 0.01);
    ke::Engine trainer([&](ke::Engine& e, const int&) -> ke::Value {
      at::manual_seed(e.state().iteration * 10 + kd::get_rank());
      const at::Tensor x = at::randn({8, 4});
      optimizer.zero_grad();
      at::mse_loss(model(x), x.sum(1, true)).backward();
      optimizer.step();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return 0.0;
    });
    trainer.on(ke::Events::ITERATION_COMPLETED, [&](ke::Engine& e) {
      if (!flips || self.recoveries() > 0 || e.state().iteration != 7) return;
      at::NoGradGuard no_grad;
      net->weight.view({-1}).view(at::kInt)[1].bitwise_xor_(1 << 22);
    });
    std::make_shared<kh::ReplicaCheck>(net.ptr())->attach(trainer, 5);
    self.keep({{"model", kh::stateful(net)}, {"optimizer", kh::stateful(optimizer)}, {"trainer", kh::stateful(trainer)}},
              trainer);
    trainer.run(std::vector<int>(40, 0), 1);
    kd::check_replicas(*net);
    std::printf("DONE world=%d iteration=%lld recoveries=%d\n", kd::get_world_size(),
                static_cast<long long>(trainer.state().iteration), self.recoveries());
    std::fflush(stdout);
  });
  kd::finalize();
}

TEST(KindlingRunLive, ANodeWhoseReplicaDivergedLeavesAndTheOthersGoOn) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(kindling::testing::free_port());
  kindling::testing::LaunchOptions o;
  o.world_size = 3;
  o.set_dist_env = false;
  o.deadline = std::chrono::seconds(90);
  for (int node = 0; node < 3; ++node) {
    // Node 0 serves the rendezvous; the others join in order, so that the first world's rank 2
    // (the one that flips) is not on the serving host.
    const std::string run = "sleep " + std::to_string(node) + "; exec " + kRun + " --nnodes 2:3 --rdzv_endpoint " +
                            endpoint + " --rdzv_id diverged --rdzv_conf last_call_timeout=5 --max_restarts 3 " +
                            "--live_recovery --nproc_per_node 1 " + kindling::testing::self_path() +
                            " --kindling-worker=live_replica_diverges";
    o.commands[node] = {"/bin/sh", "-c", run};
  }
  const auto results = kindling::testing::run_workers("", o);
  int left = 0;
  for (const auto& r : results) {
    if (r.exit_code == 0) {
      EXPECT_NE(r.out.find("DONE world=2 iteration=40 recoveries=1"), std::string::npos) << r.out << show(r);
      EXPECT_NE(r.err.find("rank 2 diverged from the majority (ranks 0, 1 of 3)"), std::string::npos) << show(r);
      continue;
    }
    ++left;
    EXPECT_FALSE(r.timed_out) << show(r);
    EXPECT_NE(r.err.find("a worker asked this node to leave the job ([rank 2/3] kindling::dist::check_replicas: the "
                         "data-parallel replicas differ at iteration 10 of Engine (they were equal at iteration 5, the "
                         "last check): rank 2 diverged from the majority (ranks 0, 1 of 3)"),
              std::string::npos)
        << show(r);
    EXPECT_NE(r.err.find("this node leaves, the others go on without it (live recovery)"), std::string::npos) << show(r);
    EXPECT_EQ(r.out.find("DONE"), std::string::npos) << r.out;
  }
  EXPECT_EQ(left, 1) << show(results[0]) << show(results[1]) << show(results[2]);
}

}  // namespace
