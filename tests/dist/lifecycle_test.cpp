// initialize / finalize: environment rules and errors, init methods (env://, tcp://,
// file://), torchrun's agent store, node layout from host names, lazy pick-up of a process
// group made outside kindling.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#include <kindling/dist/c10d.h>
#include <kindling/kindling.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

// Sets variables for one test and restores the previous values afterwards.
class EnvGuard {
 public:
  EnvGuard(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
    for (const auto& kv : vars) ::setenv(kv.first, kv.second, 1);
  }
  ~EnvGuard() {
    for (const auto& kv : saved_) {
      if (kv.second)
        ::setenv(kv.first.c_str(), kv.second->c_str(), 1);
      else
        ::unsetenv(kv.first.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string init_error(const std::string& backend, const kd::InitOptions& opts = kd::InitOptions()) {
  try {
    kd::initialize(backend, opts);
  } catch (const kindling::UsageError& e) {
    return e.what();
  }
  kd::finalize();
  return "no error";
}

#define EXPECT_CONTAINS(text, fragment) EXPECT_NE(std::string(text).find(fragment), std::string::npos) << (text)

}  // namespace

TEST(InitializeTest, RejectsUnknownBackendNamingTheAvailableOnes) {
  EnvGuard env({});
  auto msg = init_error("glooo");
  EXPECT_CONTAINS(msg, "unknown or unavailable backend 'glooo'");
  EXPECT_CONTAINS(msg, "Available backends: serial, ");
  EXPECT_CONTAINS(msg, "gloo");
#if !KINDLING_HAS_MPI
  EXPECT_CONTAINS(init_error("mpi"), "mpi needs Open MPI and -DKINDLING_WITH_MPI=ON");
#endif
  // ignite's message where there is no GPU, whether or not nccl was built.
  if (!at::hasCUDA()) EXPECT_CONTAINS(init_error("nccl"), "nccl backend is required but no cuda capable devices");
#if !KINDLING_HAS_NCCL
  if (at::hasCUDA()) EXPECT_CONTAINS(init_error("nccl"), "built without nccl");
#endif
}

TEST(InitializeTest, RejectsPartialOrMalformedEnvironment) {
  {
    EnvGuard env({{"RANK", "1"}});
    EXPECT_CONTAINS(init_error("gloo"), "RANK is set (1) but WORLD_SIZE is not");
    EXPECT_FALSE(kd::is_initialized());
    EXPECT_EQ(std::getenv("MASTER_ADDR"), nullptr) << "a failed initialize must leave the environment as it was";
  }
  {
    EnvGuard env({{"WORLD_SIZE", "2"}});
    EXPECT_CONTAINS(init_error("gloo"), "WORLD_SIZE is set (2) but RANK is not");
  }
  {
    EnvGuard env({{"LOCAL_RANK", "0"}});
    EXPECT_CONTAINS(init_error("gloo"), "LOCAL_RANK=0 is set but RANK and WORLD_SIZE are not");
  }
  {
    EnvGuard env({{"RANK", "abc"}, {"WORLD_SIZE", "2"}});
    EXPECT_CONTAINS(init_error("gloo"), "environment variable RANK='abc' is not an integer");
  }
  {
    EnvGuard env({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    EXPECT_CONTAINS(init_error("gloo"), "RANK=2 is out of range for WORLD_SIZE=2; ranks are 0..1");
  }
  {
    EnvGuard env({});
    EXPECT_CONTAINS(init_error("gloo", kd::InitOptions().rank(1)), "gives rank without world_size");
    EXPECT_CONTAINS(init_error("gloo", kd::InitOptions().init_method("udp://x")), "unsupported init_method 'udp://x'");
    EXPECT_CONTAINS(init_error("gloo", kd::InitOptions().init_method("tcp://host")), "needs a host and a port");
  }
}

TEST(InitializeTest, SingleProcessWithoutEnvironmentAndRestoreOnFinalize) {
  EnvGuard env({});
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(20)));
  EXPECT_TRUE(kd::is_initialized());
  EXPECT_EQ(kd::backend(), "gloo");
  EXPECT_EQ(kd::get_world_size(), 1);
  EXPECT_STREQ(std::getenv("MASTER_ADDR"), "127.0.0.1");
  EXPECT_STREQ(std::getenv("MASTER_PORT"), "15000");
  EXPECT_STREQ(std::getenv("RANK"), "0");
  EXPECT_CONTAINS(init_error("gloo"), "already initialized with backend 'gloo'");
  auto t = at::ones({3});
  kd::all_reduce(t);
  EXPECT_TRUE(at::equal(t, at::ones({3})));
  auto g = kd::new_group({0});
  kd::finalize();
  EXPECT_EQ(std::getenv("MASTER_ADDR"), nullptr);
  EXPECT_EQ(std::getenv("MASTER_PORT"), nullptr);
  EXPECT_EQ(std::getenv("RANK"), nullptr);
  EXPECT_EQ(kd::backend(), "serial");
  try {
    kd::all_reduce(t, kd::ReduceOp::kSum, g);
    ADD_FAILURE() << "a group from before finalize() must be rejected";
  } catch (const kindling::UsageError& e) {
    EXPECT_CONTAINS(e.what(), "created before finalize()");
  }
}

// tcp:// and file:// with rank / world size from InitOptions (no RANK in the environment).
KINDLING_WORKER(init_methods) {
  const int rank = std::atoi(std::getenv("KINDLING_TEST_RANK"));
  const int ws = std::atoi(std::getenv("KINDLING_TEST_WORLD_SIZE"));
  const std::string port = std::getenv("KINDLING_TEST_PORT");
  const std::string dir = std::getenv("KINDLING_TEST_DIR");
  for (const std::string& method : {"tcp://127.0.0.1:" + port, "file://" + dir + "/store"}) {
    kd::set_local_rank(rank);
    kd::initialize("gloo",
                   kd::InitOptions().init_method(method).rank(rank).world_size(ws).timeout(std::chrono::seconds(30)));
    WCHECK(kd::get_rank() == rank && kd::get_world_size() == ws, << method);
    WCHECK(kd::all_reduce(rank + 1) == ws * (ws + 1) / 2, << method);
    kd::barrier();
    kd::finalize();
    WCHECK(std::getenv("RANK") == nullptr, << "finalize restores the environment");
  }
}

TEST(InitializeTest, TcpAndFileInitMethods) {
  LaunchOptions opts;
  opts.world_size = 3;
  opts.set_dist_env = false;
  auto results = run_workers("init_methods", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// A job may finalize and initialize again on the same address: each round is a fresh
// process group, and no rank of a round meets the previous round's store or engine.
KINDLING_WORKER(reinitialize_same_port) {
  const int rank = std::atoi(std::getenv("KINDLING_TEST_RANK"));
  const int ws = std::atoi(std::getenv("KINDLING_TEST_WORLD_SIZE"));
  const std::string method = std::string("tcp://127.0.0.1:") + std::getenv("KINDLING_TEST_PORT");
  for (int round = 0; round < 6; ++round) {
    kd::initialize("gloo",
                   kd::InitOptions().init_method(method).rank(rank).world_size(ws).timeout(std::chrono::seconds(30)));
    // Ranks leave each round at different times.
    if (rank == round % ws) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    WCHECK(kd::all_reduce(round + rank) == ws * round + ws * (ws - 1) / 2, << "round " << round);
    kd::finalize();
  }
}

TEST(InitializeTest, FinalizeAndInitializeAgainOnTheSamePort) {
  LaunchOptions opts;
  opts.world_size = 3;
  opts.set_dist_env = false;
  auto results = run_workers("reinitialize_same_port", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// Rank 0 hosts the store and may end first: the others, still working (saving, logging)
// with their process group alive, must not be brought down by the store going away.
KINDLING_WORKER(rank_zero_leaves_first) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)));
  WCHECK(kd::all_reduce(1) == kd::get_world_size(), << "sum of ones");
  if (kd::get_rank() == 0) {
    kd::finalize();
    std::_Exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // work after rank 0 has gone
  kd::finalize();
}

TEST(InitializeTest, RankZeroMayEndBeforeTheOthers) {
  LaunchOptions opts;
  opts.world_size = 3;
  auto results = run_workers("rank_zero_leaves_first", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// No LOCAL_RANK: the local rank and node layout come from the host names of all ranks.
KINDLING_WORKER(layout_from_hostnames) {
  WCHECK(std::getenv("LOCAL_RANK") == nullptr);
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)));
  const int ws = kd::get_world_size();
  WCHECK(kd::get_local_rank() == kd::get_rank(), << kd::get_local_rank());
  WCHECK(kd::get_nproc_per_node() == ws && kd::get_nnodes() == 1 && kd::get_node_rank() == 0);
  WCHECK(std::getenv("LOCAL_RANK") != nullptr);
  kd::finalize();
  WCHECK(std::getenv("LOCAL_RANK") == nullptr, << "finalize removes what initialize wrote");
}

TEST(InitializeTest, NodeLayoutFromHostNamesWithoutLocalRank) {
  LaunchOptions opts;
  opts.world_size = 3;
  opts.env = {{"LOCAL_RANK", ""}, {"LOCAL_WORLD_SIZE", ""}};
  auto results = run_workers("layout_from_hostnames", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

KINDLING_WORKER(agent_store_client) {
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)));
  WCHECK(kd::all_reduce(kd::get_rank() + 1) == 3);
  kd::finalize();
}

// Under torchrun's static rendezvous the agent already hosts the store: every rank must
// join it as a client (under torchrun's prefix of this LibTorch version), not start a server.
TEST(InitializeTest, JoinsTorchrunAgentStoreAsClient) {
  const int port = kindling::testing::free_port();
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  so.isServer = true;
  so.waitWorkers = false;
  so.timeout = std::chrono::seconds(30);
  auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  LaunchOptions opts;
  opts.world_size = 2;
  opts.env = {{"TORCHELASTIC_USE_AGENT_STORE", "True"},
              {"TORCHELASTIC_RESTART_COUNT", "3"},
              {"MASTER_PORT", std::to_string(port)}};
  auto results = run_workers("agent_store_client", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
    // torch.distributed's layout of the same LibTorch version: up to 2.5 each restart's keys under
    // /worker/attempt_<restart count>; from 2.6 on (a new agent store per restart) no prefix.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
  const std::string prefix;
#else
  const std::string prefix = "/worker/attempt_3/";
#endif
  EXPECT_TRUE(agent->check({prefix + "default_pg/kindling/joined/1/0", prefix + "default_pg/kindling/joined/1/1"}))
      << "the ranks must use the agent's store under torchrun's prefix '" << prefix << "'";
}

// A process group made with c10d directly is picked up on kindling's next call.
KINDLING_WORKER(external_process_group) {
  const int rank = std::atoi(std::getenv("KINDLING_TEST_RANK"));
  const int ws = std::atoi(std::getenv("KINDLING_TEST_WORLD_SIZE"));
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(std::atoi(std::getenv("KINDLING_TEST_PORT")));
  so.isServer = rank == 0;
  so.waitWorkers = false;
  so.timeout = std::chrono::seconds(30);
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg =
      c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("0", store), rank, ws, opts);
  kd::use_process_group(pg, store, "gloo", std::chrono::seconds(20));
  kd::set_local_rank(rank);
  WCHECK(kd::get_world_size() == ws && kd::get_rank() == rank, << "picked up lazily");
  WCHECK(kd::model_name() == "native-dist" && kd::backend() == "gloo");
  WCHECK(kd::all_reduce(static_cast<int64_t>(rank + 1)) == ws * (ws + 1) / 2);
  auto g = kd::new_group({0, ws - 1});
  WCHECK(kd::all_reduce(1, kd::ReduceOp::kSum, g) == (g.is_member() ? 2 : 1));
  kd::finalize();
  WCHECK(kd::get_world_size() == 1);
}

// A one-process group whose process uses device 5: the node still runs one process of the
// job (idist reports 1), the local rank says which device.
TEST(SyncTest, LocalRankHintOnOneRankGroupClaimsNoMoreProcessesThanTheWorld) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("0", store), 0, 1, opts);
  kd::use_process_group(pg, store, "gloo", std::chrono::seconds(20));
  kd::set_local_rank(5);
  EXPECT_EQ(kd::get_world_size(), 1);
  EXPECT_EQ(kd::get_local_rank(), 5);
  EXPECT_EQ(kd::get_nproc_per_node(), 1);
  EXPECT_EQ(kd::get_nnodes(), 1);
  EXPECT_EQ(kd::get_node_rank(), 0);
  kd::finalize();
}

TEST(SyncTest, PicksUpExternalProcessGroupLazily) {
  LaunchOptions opts;
  opts.world_size = 3;
  opts.set_dist_env = false;
  opts.env = {{"LOCAL_WORLD_SIZE", "3"}};
  auto results = run_workers("external_process_group", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << describe(results);
}

// A rank query and a collective before initialize, under a launcher of 2 ranks: one warning
// (the first call's name, the launcher's rank and size, what to do); after a model was
// installed, no warning even once finalized.
KINDLING_WORKER(query_before_initialize) {
  const bool early = std::getenv("KINDLING_TEST_EARLY") != nullptr;
  if (early) {
    WCHECK(kd::get_world_size() == 1, << "serial before initialize, as idist");
    WCHECK(kd::get_rank() == 0);
    WCHECK(kd::all_reduce(3) == 3, << "a collective returns its input in the serial model");
  }
  WCHECK(!kd::is_initialized());
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)));
  kd::barrier();
  kd::finalize();
  WCHECK(kd::get_rank() == 0, << "serial again after finalize");
}

TEST(InitializeTest, QueriesBeforeInitializeUnderALauncherWarnOnce) {
  const std::string warning = "was called before kindling::dist::initialize";
  LaunchOptions opts;
  opts.env["KINDLING_TEST_EARLY"] = "1";
  auto results = run_workers("query_before_initialize", opts);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << describe(results);
    const auto first = r.err.find(warning);
    ASSERT_NE(first, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(warning, first + 1), std::string::npos) << "warned more than once:\n" << r.err;
    EXPECT_NE(r.err.find("kindling::dist::get_world_size was called"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("as rank " + std::to_string(r.rank) + " of 2"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Call kindling::dist::initialize(backend) first"), std::string::npos) << r.err;
  }
  opts.env.clear();  // the same program without the early calls: no warning
  results = run_workers("query_before_initialize", opts);
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << describe(results);
    EXPECT_EQ(r.err.find(warning), std::string::npos) << r.err;
  }
}
