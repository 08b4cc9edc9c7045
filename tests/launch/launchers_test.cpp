// Real launchers: kindling-run (output, multi-node, failures, signals, bad flags), Debian's
// torchrun (static and standalone), Open MPI's mpirun, and Slurm (srun and sbatch; the
// daemons are started by the CTest fixture tests/launch/slurm-up.sh). Every launcher must
// make examples/hello_dist print the same three lines.
#include <gtest/gtest.h>
#include <kindling/kindling.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launch/launchers.h"
#include "support/multiprocess.h"
#include "support/summary.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::follows_first_failure;
using kindling::testing::RankResult;
using kindling::testing::run_command;
using kindling::testing::slurm_env;
using kindling::testing::torchrun;
using Strings = std::vector<std::string>;

namespace {

const std::string kRun = KINDLING_RUN_PATH;
const std::string kHello = HELLO_DIST_PATH;
const Strings kThreeLines = {"rank=0 local_rank=0 world_size=3 backend=gloo all_reduce=6",
                             "rank=1 local_rank=1 world_size=3 backend=gloo all_reduce=6",
                             "rank=2 local_rank=2 world_size=3 backend=gloo all_reduce=6"};

std::string self_path() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
}

// hello_dist's lines, with whatever prefix a launcher adds removed, sorted.
Strings hello_lines(const std::string& out) {
  Strings lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto pos = line.find("rank=");
    if (pos != std::string::npos && line.find("world_size=") != std::string::npos) lines.push_back(line.substr(pos));
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::string show(const RankResult& r) { return describe({r}); }

// Runs several launcher commands side by side; returns all their hello_dist lines, sorted.
Strings run_all(const kindling::testing::LaunchOptions& o) {
  auto results = kindling::testing::run_workers("", o);
  Strings all;
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok()) << describe(results);
    for (auto& l : hello_lines(r.out)) all.push_back(l);
  }
  std::sort(all.begin(), all.end());
  return all;
}

void expect_three_lines(const RankResult& r) {
  EXPECT_TRUE(r.ok()) << show(r);
  EXPECT_EQ(hello_lines(r.out), kThreeLines) << show(r);
}

// ---- kindling-run ------------------------------------------------------------------

TEST(KindlingRun, RunsHelloDistOnThreeRanksWithPrefixedOutput) {
  auto r = run_command({kRun, "--nproc_per_node", "3", kHello});
  expect_three_lines(r);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string prefixed = "[rank" + std::to_string(rank) + "]: rank=" + std::to_string(rank) + " ";
    EXPECT_NE(r.out.find(prefixed), std::string::npos) << show(r);
  }
}

TEST(KindlingRun, StandaloneAndUnprefixedOutput) {
  auto r = run_command({kRun, "--standalone", "--nproc-per-node=3", "--no_prefix", kHello});
  expect_three_lines(r);
  EXPECT_EQ(r.out.find("[rank"), std::string::npos) << show(r);
}

// Also OMP_NUM_THREADS: the cores shared between the node's workers, unless the user set it.
TEST(KindlingRun, GivesWorkersTheTorchrunEnvironment) {
  auto run = [](const std::string& threads) {
    return run_command({kRun, "--nproc_per_node", "2", "--master_port", "29533", "/bin/sh", "-c",
                        "echo env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE "
                        "$ROLE_RANK $ROLE_NAME $MASTER_ADDR $MASTER_PORT $KINDLING_RUN threads=$OMP_NUM_THREADS"},
                       {{"OMP_NUM_THREADS", threads}});
  };
  const std::string shared = std::to_string(std::max(1u, std::thread::hardware_concurrency() / 2));
  for (const auto& [threads, expected] : {std::pair{std::string(), shared}, {"3", "3"}}) {
    const auto r = run(threads);
    for (const std::string i : {"0", "1"}) {
      const std::string line = "[rank" + i + "]: env " + i + " " + i + " 2 2 0 1 " + i + " default 127.0.0.1 29533 1 ";
      EXPECT_TRUE(r.ok() && r.out.find(line + "threads=" + expected) != std::string::npos) << line << show(r);
    }
  }
}

// Two kindling-run invocations, node ranks 0 and 1, form one job of 4 ranks.
TEST(KindlingRun, TwoNodesOnOneMachine) {
  kindling::testing::LaunchOptions o;
  o.world_size = 2;
  o.set_dist_env = false;
  const std::string port = std::to_string(kindling::testing::free_port());
  for (int node = 0; node < 2; ++node) {
    o.commands[node] = {kRun,
                        "--nnodes",
                        "2",
                        "--node_rank",
                        std::to_string(node),
                        "--nproc_per_node",
                        "2",
                        "--master_addr",
                        "127.0.0.1",
                        "--master_port",
                        port,
                        kHello};
  }
  const Strings all = run_all(o);
  const Strings expected = {"rank=0 local_rank=0 world_size=4 backend=gloo all_reduce=10",
                            "rank=1 local_rank=1 world_size=4 backend=gloo all_reduce=10",
                            "rank=2 local_rank=0 world_size=4 backend=gloo all_reduce=10",
                            "rank=3 local_rank=1 world_size=4 backend=gloo all_reduce=10"};
  EXPECT_EQ(all, expected);
}

// Two elastic agents (--nnodes 2:2, the rendezvous served by the first to bind the endpoint)
// form one job of 4 ranks; with a worker that fails in the first round, both agents restart
// their workers together (the other worker, asleep, is stopped) and the second round sees
// TORCHELASTIC_RESTART_COUNT 1.
TEST(KindlingRun, ElasticAgentsFormOneJobAndRestartTogether) {
  kindling::testing::LaunchOptions o;
  o.world_size = 2;
  o.set_dist_env = false;
  const std::string endpoint = "127.0.0.1:" + std::to_string(kindling::testing::free_port());
  for (int node = 0; node < 2; ++node) {
    o.commands[node] = {kRun,     "--nnodes",  "2:2",         "--rdzv_endpoint",
                        endpoint, "--rdzv_id", "elastic-one", "--nproc_per_node",
                        "2",      kHello};
  }
  EXPECT_EQ(run_all(o), (Strings{"rank=0 local_rank=0 world_size=4 backend=gloo all_reduce=10",
                                 "rank=1 local_rank=1 world_size=4 backend=gloo all_reduce=10",
                                 "rank=2 local_rank=0 world_size=4 backend=gloo all_reduce=10",
                                 "rank=3 local_rank=1 world_size=4 backend=gloo all_reduce=10"}));

  const std::string agent =
      kRun + " --nnodes 2:2 --rdzv_endpoint 127.0.0.1:" + std::to_string(kindling::testing::free_port()) +
      " --rdzv_id elastic-two --max_restarts 1 --nproc_per_node 1 /bin/sh -c \"$W\"";
  const std::string script =
      "W='echo layout $RANK/$WORLD_SIZE node $GROUP_RANK/$GROUP_WORLD_SIZE restart $TORCHELASTIC_RESTART_COUNT; "
      "if [ $TORCHELASTIC_RESTART_COUNT = 1 ]; then exit 0; fi; if [ $RANK = 1 ]; then exit 3; fi; sleep 30'; "
      "export W; " +
      agent + " & a=$!; " + agent + " & b=$!; wait $a; ea=$?; wait $b; echo exit=$ea,$?";
  auto r = run_command({"/bin/sh", "-c", script});
  EXPECT_NE(r.out.find("exit=0,0"), std::string::npos) << show(r);
  for (const char* line : {"layout 0/2 node 0/2 restart 0", "layout 1/2 node 1/2 restart 0",
                           "layout 0/2 node 0/2 restart 1", "layout 1/2 node 1/2 restart 1"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << show(r);
  }
  EXPECT_NE(r.err.find("rendezvous round 1 (restart 1): 2 nodes"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("a node waits for the next rendezvous round; stopped this node's workers"), std::string::npos)
      << show(r);
}

// A kindling program whose rank 1 kills itself with SIGKILL while the others wait in a
// collective; it records every rank's pid first.
KINDLING_WORKER(die_on_rank1) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(120)));
  const std::string dir = std::getenv("PID_DIR");
  std::ofstream(dir + "/pid." + std::to_string(kd::get_rank())) << ::getpid() << "\n";
  kd::barrier();
  if (kd::get_rank() == 1) {
    std::cerr << "rank 1 is about to be killed" << std::endl;
    std::raise(SIGKILL);
  }
  kd::barrier();  // the survivors wait here until kindling-run stops them
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

TEST(KindlingRun, KillNineOnOneRankStopsTheJobAndNamesIt) {
  char tmpl[] = "/tmp/kindling-pids-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command({kRun, "--nproc_per_node", "3", self_path(), "--kindling-worker=die_on_rank1"},
                       {{"PID_DIR", dir}}, std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(r.timed_out) << show(r);
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << show(r);
  EXPECT_LT(seconds, 10.0) << show(r);
  // Rank 1 first; the others may fail on their own (the peer lost) while being stopped.
  EXPECT_NE(r.err.find(" of 3 workers failed:\n  rank 1 (local rank 1, pid "), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("killed by SIGKILL"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("      rank 1 is about to be killed"), std::string::npos) << show(r);
  EXPECT_TRUE(follows_first_failure(r.err, 0) && follows_first_failure(r.err, 2)) << show(r);
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream in(dir + "/pid." + std::to_string(rank));
    pid_t pid = 0;
    ASSERT_TRUE(in >> pid) << "rank " << rank << " wrote no pid; " << show(r);
    EXPECT_FALSE(alive(pid)) << "rank " << rank << " (pid " << pid << ") is still running";
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

// Both fail: rank 1 first, rank 0 (which ignores SIGTERM) with an error of its own while being
// stopped. Both count; the second is named once, after the first.
TEST(KindlingRun, AWorkerThatFailsWhileBeingStoppedCountsAsFailed) {
  auto r = run_command({kRun, "--nproc_per_node", "2", "/bin/sh", "-c",
                        // rank 1 fails once rank 0 ignores SIGTERM ($PPID: kindling-run, the same for both)
                        "f=/tmp/kindling-trap-$PPID; if [ $RANK = 1 ]; then while [ ! -e $f ]; do sleep 0.05; done; "
                        "rm -f $f; echo bad input >&2; exit 3; fi; trap '' TERM; touch $f; sleep 1; "
                        "echo lost the peer >&2; exit 1"});
  EXPECT_EQ(r.exit_code, 3) << show(r);
  EXPECT_NE(r.err.find("2 of 2 workers failed:\n  rank 1 (local rank 1, pid "), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("exited with code 1 after rank 1's failure, while being stopped"), std::string::npos) << show(r);
}

// Rank 1 cannot start (no such interface); rank 0 learns it within a second and fails too:
// the summary's first failure is rank 1's own, not rank 0's report of it (times in ns).
TEST(KindlingRun, TheFirstFailureIsTheRankThatFailedFirst) {
  auto r = run_command({kRun, "--nproc_per_node", "2", "/bin/sh", "-c",
                        "[ $RANK = 1 ] && export GLOO_SOCKET_IFNAME=kdl-absent0; exec " + kHello + " --backend gloo"});
  EXPECT_NE(r.exit_code, 0) << show(r);
  EXPECT_NE(r.err.find("first failure (from the error files): rank 1 (local rank 1)"), std::string::npos) << show(r);
}

TEST(KindlingRun, ExitCodeOfTheFirstFailureIsReturned) {
  auto r = run_command({kRun, "--nproc_per_node", "2", "/bin/sh", "-c",
                        "if [ $RANK = 1 ]; then echo bad input >&2; exit 3; fi; sleep 30"});
  EXPECT_EQ(r.exit_code, 3) << show(r);
  EXPECT_LT(r.seconds, 10.0) << show(r);
  EXPECT_NE(r.err.find("rank 1 (local rank 1, pid "), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("exited with code 3"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("      bad input"), std::string::npos) << show(r);
}

TEST(KindlingRun, ForwardsSigtermToTheWorkers) {
  // kindling-run in the background; SIGTERM it once the workers run; they must be gone.
  const std::string script =
      "'" + kRun + "' --nproc_per_node 2 /bin/sh -c 'echo started; echo $$ > " +
      "/tmp/kindling-sigterm.$RANK; exec sleep 60' & pid=$!; "
      "for i in $(seq 100); do [ -f /tmp/kindling-sigterm.1 ] && [ -f /tmp/kindling-sigterm.0 ] && break; sleep 0.1; "
      "done; "
      "kill -TERM $pid; wait $pid; echo exit=$?; "
      "for r in 0 1; do kill -0 $(cat /tmp/kindling-sigterm.$r) 2>/dev/null && echo alive=$r; done; "
      "rm -f /tmp/kindling-sigterm.0 /tmp/kindling-sigterm.1";
  auto r = run_command({"/bin/sh", "-c", script});
  EXPECT_TRUE(r.ok()) << show(r);
  EXPECT_NE(r.out.find("exit=143"), std::string::npos) << show(r);
  EXPECT_EQ(r.out.find("alive="), std::string::npos) << show(r);
  // The message names who sent the signal: the test's shell.
  EXPECT_NE(r.err.find("received SIGTERM from pid "), std::string::npos) << show(r);
  EXPECT_NE(r.err.find(" (sh); forwarded it to the 2 workers"), std::string::npos) << show(r);
  EXPECT_LT(r.seconds, 10.0) << show(r);
}

// A bad command line ends with its reason, after one usage line pointing at --help, so that
// the reason is what the terminal shows last (not scrolled away by the whole usage).
TEST(KindlingRun, BadFlagsAreRejectedWithExitCodeTwo) {
  const std::vector<std::pair<Strings, std::string>> cases = {
      {{"--nproc_per_node", "0", kHello}, "--nproc_per_node must be at least 1"},
      {{"--nproc_per_node", "x", kHello}, "--nproc_per_node expects a non-negative integer, got 'x'"},
      {{"--nnodes", "1:2", kHello}, "elastic --nnodes 1:2 needs --rdzv_endpoint"},
      {{"--nnodes", "2:1", "--rdzv_endpoint", "127.0.0.1", "--rdzv_id", "j", kHello}, "MIN greater than MAX"},
      {{"--rdzv_conf", "bogus=1", kHello}, "--rdzv_conf: unknown setting 'bogus=1'"},
      {{"--nnodes", "2", "--node_rank", "2", kHello}, "--node_rank 2 is out of range for --nnodes 2"},
      {{"--master_port", "70000", kHello}, "--master_port must be between 1 and 65535"},
      {{"--standalone", "--nnodes", "2", "--node_rank", "0", kHello}, "--standalone runs one node"},
      {{"--standalone", "--master_port", "2000", kHello}, "drop --master_addr/--master_port"},
      {{"--frobnicate", kHello}, "unknown option '--frobnicate'"},
      {{"--nproc_per_node"}, "--nproc_per_node needs a value"},
      {{"--nproc_per_node", "2"}, "no program given"},
      {{"--standalone=yes", kHello}, "--standalone takes no value"},
      {{"--grace_period", "inf", kHello}, "--grace_period expects seconds (a number from 0 to 10000000"},
      {{"--rdzv_conf", "join_timeout=nan", kHello}, "got 'nan'"},
      {{"--rdzv_conf", "keep_alive_interval=0", kHello},
       "--rdzv_conf: keep_alive_interval expects seconds (a number from 0.01 to 10000000, about 115 days), got '0'"},
      {{"--rdzv_conf", "last_call_timeout=1,keep_alive_max_attempt=0", kHello},
       "keep_alive_max_attempt expects a whole number of questions from 1 to 100, got '0'"},
      {{"--rdzv_conf", "lease=2.5", kHello}, "lease expects a whole number of seconds from 1 to 3600, got '2.5'"},
      {{"--rdzv_conf", "takeover_wait", kHello}, "--rdzv_conf: 'takeover_wait' needs a value: takeover_wait=V"},
      {{"--rdzv_conf", "silence=3", kHello}, "unknown setting 'silence=3' (known: join_timeout, "},
      {{"--rdzv_backend", "etcd-v2", kHello}, "give --rdzv_backend etcd (every node of the job runs kindling-run)"},
      {{"--rdzv_backend", "zookeeper", kHello}, "--rdzv_backend is c10d (elastic), etcd (elastic) or static"},
      {{"--live_recovery", kHello}, "--live_recovery needs the elastic rendezvous"},
      {{"--warm_join", "--nnodes", "1:2", "--rdzv_endpoint", "localhost", "--rdzv_id", "j", kHello},
       "--warm_join needs --live_recovery"},
      {{"--rdzv_endpoint", "h1:2379,", "--rdzv_backend", "etcd", "--rdzv_id", "j", kHello},
       "--rdzv_endpoint (etcd members) needs a host, got ''"},
      {{"./no-such-program"}, "cannot execute './no-such-program'"},
  };
  for (const auto& c : cases) {
    Strings argv = {kRun};
    argv.insert(argv.end(), c.first.begin(), c.first.end());
    auto r = run_command(argv);
    EXPECT_EQ(r.exit_code, 2) << show(r);
    std::string err = r.err;
    while (!err.empty() && err.back() == '\n') err.pop_back();
    const std::string last = err.substr(err.rfind('\n') + 1);  // npos + 1: all of it
    EXPECT_NE(last.find(c.second), std::string::npos) << "expected '" << c.second << "' last\n" << show(r);
    EXPECT_EQ(r.err.find("Exit status:"), std::string::npos) << "the whole usage was printed\n" << show(r);
    if (c.second.rfind("cannot execute", 0) != 0)
      EXPECT_NE(r.err.find("kindling-run --help"), std::string::npos) << "no pointer to --help\n" << show(r);
  }
}

// ---- torchrun (Debian's python3-torch) ----------------------------------------------

TEST(Torchrun, StaticRendezvousWithTheAgentStore) {
  const std::string port = std::to_string(kindling::testing::free_port());
  auto r = run_command(torchrun({"--nproc_per_node", "3", "--master_port", port, "--no_python", kHello}), {},
                       std::chrono::seconds(120));
  expect_three_lines(r);
}

TEST(Torchrun, Standalone) {
  auto r = run_command(torchrun({"--standalone", "--nproc_per_node", "3", "--no_python", kHello}), {},
                       std::chrono::seconds(120));
  expect_three_lines(r);
}

// ---- mpirun (Open MPI) with the gloo backend ---------------------------------------

TEST(Mpirun, GlooBackendFromOmpiVariables) {
  auto r = run_command({"/usr/bin/mpirun", "--oversubscribe", "-np", "3", kHello}, kindling::testing::mpirun_env(),
                       std::chrono::seconds(120));
  expect_three_lines(r);
}

// A Parallel-based program (examples/dist_tutorial) under torchrun: Parallel only initializes.
TEST(Torchrun, ParallelProgramRunsUnchanged) {
  auto r = run_command(
      torchrun({"--standalone", "--nproc_per_node", "2", "--no_python", DIST_TUTORIAL_PATH, "group-allreduce"}), {},
      std::chrono::seconds(120));
  EXPECT_TRUE(r.ok()) << show(r);
  EXPECT_NE(r.out.find("Rank 0 has data 2"), std::string::npos) << show(r);
  EXPECT_NE(r.out.find("Rank 1 has data 2"), std::string::npos) << show(r);
  EXPECT_NE(r.err.find("launcher: torchrun"), std::string::npos) << show(r);
}

// ---- horovodrun's environment ------------------------------------------------------
// horovodrun itself is not packaged for Debian; the ranks get exactly the variables it
// sets for a single-node gloo job and no RANK / WORLD_SIZE.
TEST(Horovod, RanksFromHorovodVariables) {
  kindling::testing::LaunchOptions o;
  o.world_size = 3;
  o.set_dist_env = false;
  const std::string port = std::to_string(kindling::testing::free_port());
  for (int r = 0; r < 3; ++r) {
    o.commands[r] = {kHello};
    o.rank_env[r] = {{"HOROVOD_RANK", std::to_string(r)},
                     {"HOROVOD_SIZE", "3"},
                     {"HOROVOD_LOCAL_RANK", std::to_string(r)},
                     {"HOROVOD_LOCAL_SIZE", "3"},
                     {"HOROVOD_CROSS_RANK", "0"},
                     {"HOROVOD_CROSS_SIZE", "1"},
                     {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"},
                     {"HOROVOD_GLOO_RENDEZVOUS_PORT", port},
                     {"HOROVOD_CONTROLLER", "gloo"},
                     {"HOROVOD_CPU_OPERATIONS", "gloo"}};
  }
  EXPECT_EQ(run_all(o), kThreeLines);
}

#if KINDLING_HAS_MPI
const Strings kThreeMpiLines = {"rank=0 local_rank=0 world_size=3 backend=mpi all_reduce=6",
                                "rank=1 local_rank=1 world_size=3 backend=mpi all_reduce=6",
                                "rank=2 local_rank=2 world_size=3 backend=mpi all_reduce=6"};

TEST(Mpirun, MpiBackend) {
  auto r = run_command({"/usr/bin/mpirun", "--oversubscribe", "-np", "3", kHello, "--backend", "mpi"},
                       kindling::testing::mpirun_env(), std::chrono::seconds(120));
  EXPECT_TRUE(r.ok()) << show(r);
  EXPECT_EQ(hello_lines(r.out), kThreeMpiLines) << show(r);
}

TEST(KindlingRun, MpiBackendIsRefusedWithTheMpirunCommand) {
  auto r = run_command({kRun, "--nproc_per_node", "2", kHello, "--backend", "mpi"});
  EXPECT_NE(r.exit_code, 0) << show(r);
  EXPECT_NE(r.err.find("MPI programs are started by mpirun or srun --mpi=pmix, e.g. `mpirun -np 2"), std::string::npos)
      << show(r);
}
#endif

// ---- Slurm (single node started by the CTest fixture) ------------------------------

TEST(Slurm, SrunThreeTasks) {
  auto r = run_command({"/usr/bin/srun", "-n", "3", "--time", "2", kHello}, slurm_env(), std::chrono::seconds(120));
  expect_three_lines(r);
}

#if KINDLING_HAS_MPI
TEST(Slurm, SrunPmixWithTheMpiBackend) {
  auto r = run_command({"/usr/bin/srun", "--mpi=pmix", "-n", "3", "--time", "2", kHello, "--backend", "mpi"},
                       slurm_env(), std::chrono::seconds(120));
  EXPECT_TRUE(r.ok()) << show(r);
  EXPECT_EQ(hello_lines(r.out), kThreeMpiLines) << show(r);
}
#endif

TEST(Slurm, SbatchScriptWithSrunAndADirectRunThatIsRefused) {
  char tmpl[] = "/tmp/kindling-sbatch-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  {
    std::ofstream script(dir + "/job.sh");
    script << "#!/bin/sh\n#SBATCH -n 3\n#SBATCH --time 2\n"
           << "'" << kHello << "' ; echo \"direct run exit=$?\"\n"
           << "srun '" << kHello << "'\n";
  }
  auto r = run_command({"/usr/bin/sbatch", "--wait", "-o", dir + "/out.txt", dir + "/job.sh"}, slurm_env(),
                       std::chrono::seconds(120));
  std::ifstream in(dir + "/out.txt");
  std::stringstream out;
  out << in.rdbuf();
  EXPECT_TRUE(r.ok()) << show(r) << "\njob output:\n" << out.str();
  EXPECT_EQ(hello_lines(out.str()), kThreeLines) << out.str();
  EXPECT_NE(out.str().find("not as one of its 3 tasks: start it with `srun ./program`"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("direct run exit=1"), std::string::npos) << out.str();
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
