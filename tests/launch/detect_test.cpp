// Launcher detection: an environment map in, a LaunchEnvironment out (launch_env.h).
#include <gtest/gtest.h>
#include <kindling/dist/launch_env.h>
#include <kindling/error.h>

#include <string>
#include <vector>

namespace kd = kindling::dist;
using Strings = std::vector<std::string>;

namespace {

// idist's table plus multi-bracket and padding cases.
TEST(Hostlist, ExpandsLikeIdist) {
  const std::vector<std::pair<std::string, Strings>> cases = {
      {"localhost", {"localhost"}},
      {"compute!:b24_[1-2].r", {"compute!:b24_1.r", "compute!:b24_2.r"}},
      {"quartz[4-8]", {"quartz4", "quartz5", "quartz6", "quartz7", "quartz8"}},
      {"c1001a-[11,17]", {"c1001a-11", "c1001a-17"}},
      {"c1001a-s[11,17]", {"c1001a-s11", "c1001a-s17"}},
      {"c1009a-s17,c1010a-s11", {"c1009a-s17", "c1010a-s11"}},
      {"gpu-compute-on-demand-dy-g4dnxlarge-[1-4]",
       {"gpu-compute-on-demand-dy-g4dnxlarge-1", "gpu-compute-on-demand-dy-g4dnxlarge-2",
        "gpu-compute-on-demand-dy-g4dnxlarge-3", "gpu-compute-on-demand-dy-g4dnxlarge-4"}},
      {"node[18-19,1-16,21-22]",
       {"node1",  "node2",  "node3",  "node4",  "node5",  "node6",  "node7",  "node8",  "node9",  "node10",
        "node11", "node12", "node13", "node14", "node15", "node16", "node18", "node19", "node21", "node22"}},
      {"node[4-8,12,16-20,22,24-26]",
       {"node4", "node5", "node6", "node7", "node8", "node12", "node16", "node17", "node18", "node19", "node20",
        "node22", "node24", "node25", "node26"}},
      {"machine2-[02-4]vm1", {"machine2-02vm1", "machine2-03vm1", "machine2-04vm1"}},
      {"machine2-[02-3]vm1, machine4-[0003-5].vml2",
       {"machine2-02vm1", "machine2-03vm1", "machine4-0003.vml2", "machine4-0004.vml2", "machine4-0005.vml2"}},
      {"machine2-[009-11]vm1", {"machine2-009vm1", "machine2-010vm1", "machine2-011vm1"}},
      {"node[1,2,3]", {"node1", "node2", "node3"}},
      {"compute-b24-[1-3,5-9], compute-b25-[1,4,8],compute-b25-[2-9,13]",
       {"compute-b24-1", "compute-b24-2", "compute-b24-3", "compute-b24-5", "compute-b24-6",
        "compute-b24-7", "compute-b24-8", "compute-b24-9", "compute-b25-1", "compute-b25-4",
        "compute-b25-8", "compute-b25-2", "compute-b25-3", "compute-b25-4", "compute-b25-5",
        "compute-b25-6", "compute-b25-7", "compute-b25-8", "compute-b25-9", "compute-b25-13"}},
      {"node[0-2]", {"node0", "node1", "node2"}},
      {"rack[1-2]-n[01-02]", {"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}},
  };
  for (const auto& c : cases) EXPECT_EQ(kd::expand_hostlist(c.first), c.second) << c.first;
}

TEST(Hostlist, RejectsMalformedLists) {
  for (const std::string bad : {"invalid[]", "node[1-", "node]1", "node[a-b]", "node[5-2]"}) {
    try {
      kd::expand_hostlist(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const kindling::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("hostlist invalid"), std::string::npos) << e.what();
    }
  }
}

TEST(TasksPerNode, ExpandsRepeats) {
  EXPECT_EQ(kd::expand_tasks_per_node("2"), (std::vector<int>{2}));
  EXPECT_EQ(kd::expand_tasks_per_node("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(kd::expand_tasks_per_node("4,3(x2)"), (std::vector<int>{4, 3, 3}));
  EXPECT_THROW(kd::expand_tasks_per_node("2(x3"), kindling::UsageError);
  EXPECT_THROW(kd::expand_tasks_per_node("two"), kindling::UsageError);
}

kd::EnvMap slurm(const std::string& procid, const std::string& localid, const std::string& ntasks,
                 const std::string& nodes, const std::string& nodelist) {
  return {{"SLURM_JOB_ID", "12345"},       {"SLURM_STEP_ID", "0"},   {"SLURM_PROCID", procid},
          {"SLURM_LOCALID", localid},      {"SLURM_NTASKS", ntasks}, {"SLURM_JOB_NUM_NODES", nodes},
          {"SLURM_JOB_NODELIST", nodelist}};
}

void expect_config(const kd::LaunchEnvironment& e, int rank, int local, int ws, const std::string& addr, int port) {
  EXPECT_EQ(e.rank, rank);
  EXPECT_EQ(e.local_rank, local);
  EXPECT_EQ(e.world_size, ws);
  EXPECT_EQ(e.master_addr, addr);
  EXPECT_EQ(e.master_port, port);
}

// idist's tested expectations (behaviour file section 2.2).
TEST(DetectSlurm, DerivesRanksAndRendezvous) {
  auto e = kd::detect_launch_environment(slurm("1", "1", "2", "1", "c1"));
  EXPECT_EQ(e.launcher, "slurm");
  expect_config(e, 1, 1, 2, "c1", 17345);
  expect_config(kd::detect_launch_environment(slurm("5", "1", "8", "2", "c1, c2")), 5, 1, 8, "c1", 17345);
  auto env = slurm("0", "0", "1", "1", "c1");
  env.insert(
      {{"RANK", "2"}, {"LOCAL_RANK", "2"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "2233"}});
  expect_config(kd::detect_launch_environment(env), 2, 2, 8, "127.0.0.1", 2233);
  env = slurm("3", "3", "4", "1", "c1");
  env.insert(
      {{"RANK", "3"}, {"LOCAL_RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "c1"}, {"MASTER_PORT", "12233"}});
  expect_config(kd::detect_launch_environment(env), 3, 3, 4, "c1", 12233);
  env = slurm("3", "1", "4", "2", "c1");
  env.insert(
      {{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "c1"}, {"MASTER_PORT", "12233"}});
  expect_config(kd::detect_launch_environment(env), 3, 1, 4, "c1", 12233);
  env = slurm("0", "0", "2", "1", "n[07-09]");
  env["SLURM_JOB_ID"] = "15000";
  expect_config(kd::detect_launch_environment(env), 0, 0, 2, "n07", 20000);
}

TEST(DetectSlurm, LocalWorldSizeFromStepTasksPerNode) {
  auto env = slurm("4", "1", "7", "3", "n[1-3]");
  env["SLURM_NODEID"] = "1";
  env["SLURM_STEP_TASKS_PER_NODE"] = "3(x2),1";
  auto e = kd::detect_launch_environment(env);
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.node_rank, 1);
}

std::string error_of(const kd::EnvMap& env) {
  try {
    kd::detect_launch_environment(env);
  } catch (const kindling::UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(DetectSlurm, RejectsInconsistentOrIncompleteEnvironments) {
  auto env = slurm("3", "1", "4", "2", "c1");
  env.insert({{"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "c1"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(error_of(env).find("inconsistent with the Slurm ones"), std::string::npos) << error_of(env);
  env = slurm("0", "0", "4", "1", "c1");
  env.insert({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "c1"}, {"MASTER_PORT", "1"}});
  EXPECT_NE(error_of(env).find("at least as many processes"), std::string::npos) << error_of(env);
  env = slurm("0", "0", "2", "1", "[]");
  EXPECT_NE(error_of(env).find("no host name found in SLURM_JOB_NODELIST"), std::string::npos) << error_of(env);
  env = slurm("0", "0", "2", "1", "c1");
  env.erase("SLURM_LOCALID");
  EXPECT_NE(error_of(env).find("missing SLURM_LOCALID"), std::string::npos) << error_of(env);
}

TEST(DetectSlurm, BatchStepIsNotATask) {
  auto env = slurm("0", "0", "3", "1", "vm");
  env.erase("SLURM_STEP_ID");
  EXPECT_NE(error_of(env).find("start it with `srun ./program`"), std::string::npos) << error_of(env);
  // kindling-run or torchrun inside the batch script: their variables are used.
  env.insert(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "2"}});
  auto e = kd::detect_launch_environment(env);
  EXPECT_EQ(e.launcher, "env");
  expect_config(e, 1, 1, 2, "127.0.0.1", 2);
  env = slurm("0", "0", "1", "1", "vm");
  env.erase("SLURM_STEP_ID");
  EXPECT_FALSE(kd::detect_launch_environment(env).detected());
}

TEST(DetectSlurm, PartialTorchVariablesAreIgnoredWithAWarning) {
  auto env = slurm("1", "1", "2", "1", "c1");
  env.insert({{"RANK", "7"}, {"LOCAL_RANK", "7"}, {"WORLD_SIZE", "8"}});
  auto e = kd::detect_launch_environment(env);
  expect_config(e, 1, 1, 2, "c1", 17345);
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_NE(e.warnings[0].find("MASTER_ADDR"), std::string::npos) << e.warnings[0];
}

TEST(DetectTorchrun, ReadsTheTorchrunVariables) {
  kd::EnvMap env{
      {"RANK", "3"},       {"LOCAL_RANK", "1"},         {"WORLD_SIZE", "4"},      {"LOCAL_WORLD_SIZE", "2"},
      {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "none"}};
  auto e = kd::detect_launch_environment(env);
  EXPECT_EQ(e.launcher, "torchrun");
  expect_config(e, 3, 1, 4, "10.1.1.1", 29500);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 1);
  env.erase("TORCHELASTIC_RUN_ID");
  env["KINDLING_RUN"] = "1";
  EXPECT_EQ(kd::detect_launch_environment(env).launcher, "kindling-run");
  env.erase("KINDLING_RUN");
  EXPECT_EQ(kd::detect_launch_environment(env).launcher, "env");
}

TEST(DetectTorchrun, RejectsPartialOrOutOfRangeValues) {
  EXPECT_NE(error_of({{"RANK", "0"}}).find("RANK is set (0) but WORLD_SIZE is not"), std::string::npos);
  EXPECT_NE(error_of({{"WORLD_SIZE", "2"}}).find("WORLD_SIZE is set (2) but RANK is not"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("out of range"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}).find("RANK"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}).find("LOCAL_RANK=1"),
            std::string::npos);
  // LOCAL_RANK alone is only a hint here; initialize() rejects it with env://.
  auto e = kd::detect_launch_environment({{"LOCAL_RANK", "1"}});
  EXPECT_FALSE(e.detected());
  EXPECT_EQ(e.local_rank, 1);
}

TEST(DetectOpenMpi, ReadsOmpiVariablesAndDerivesAPort) {
  kd::EnvMap env{{"OMPI_COMM_WORLD_RANK", "2"},
                 {"OMPI_COMM_WORLD_SIZE", "3"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                 {"OMPI_COMM_WORLD_NODE_RANK", "2"},
                 {"OMPI_MCA_ess_base_jobid", "1571160065"},
                 {"PMIX_RANK", "2"}};
  auto e = kd::detect_launch_environment(env);
  EXPECT_EQ(e.launcher, "mpirun");
  // A port from the job id, below the ephemeral ports (32768 and up): 20000 + (jobid >> 16) % 12768.
  expect_config(e, 2, 2, 3, "127.0.0.1", 20000 + (1571160065LL >> 16) % 12768);
  EXPECT_EQ(e.local_world_size, 3);
  // Several nodes: kindling cannot know rank 0's host. The mpi backend does not need it;
  // initialize() refuses the others with this message.
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "1";
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  const auto several = kd::detect_launch_environment(env);
  EXPECT_FALSE(several.master_addr.has_value());
  EXPECT_NE(several.master_addr_missing.find("export MASTER_ADDR"), std::string::npos) << several.master_addr_missing;
  env["MASTER_ADDR"] = "n1";
  env["MASTER_PORT"] = "2000";
  expect_config(kd::detect_launch_environment(env), 2, 0, 3, "n1", 2000);
  // mpirun inside a Slurm allocation: mpirun's ranks win over the batch step's.
  env.insert({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "3"}});
  EXPECT_EQ(kd::detect_launch_environment(env).launcher, "mpirun");
  EXPECT_NE(error_of({{"OMPI_COMM_WORLD_RANK", "0"}}).find("missing OMPI_COMM_WORLD_SIZE"), std::string::npos);
}

// Half of torch's pair left in the shell under mpirun: mpirun's numbers win, with a warning;
// both RANK and WORLD_SIZE set still override mpirun.
TEST(DetectOpenMpi, StrayWorldSizeOrRankIsIgnoredWithAWarning) {
  kd::EnvMap env{{"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                 {"OMPI_MCA_ess_base_jobid", "1571160065"},
                 {"WORLD_SIZE", "2"}};
  auto e = kd::detect_launch_environment(env);
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 1);
  ASSERT_EQ(e.warnings.size(), 1u);
  EXPECT_NE(
      e.warnings[0].find("WORLD_SIZE=2 is set without RANK and ignored: the ranks come from mpirun (rank 1 of 2)"),
      std::string::npos)
      << e.warnings[0];
  env.erase("WORLD_SIZE");
  env["RANK"] = "0";
  EXPECT_NE(kd::detect_launch_environment(env).warnings.at(0).find("RANK=0 is set without WORLD_SIZE"),
            std::string::npos);
  env["WORLD_SIZE"] = "2";
  EXPECT_EQ(kd::detect_launch_environment(env).launcher, "env") << "both set: torch's variables win";
}

TEST(DetectPmix, NeedsASize) {
  auto e = kd::detect_launch_environment({{"PMIX_RANK", "1"}, {"OMPI_APP_CTX_NUM_PROCS", "2"}});
  EXPECT_EQ(e.launcher, "pmix");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_FALSE(e.local_rank.has_value());
  EXPECT_NE(error_of({{"PMIX_RANK", "1"}}).find("world size is unknown"), std::string::npos);
}

TEST(DetectHorovod, ReadsHorovodVariables) {
  kd::EnvMap env{{"HOROVOD_RANK", "1"},
                 {"HOROVOD_SIZE", "2"},
                 {"HOROVOD_LOCAL_RANK", "1"},
                 {"HOROVOD_LOCAL_SIZE", "2"},
                 {"HOROVOD_CROSS_RANK", "0"},
                 {"HOROVOD_CROSS_SIZE", "1"},
                 {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.5"},
                 {"HOROVOD_GLOO_RENDEZVOUS_PORT", "41000"}};
  auto e = kd::detect_launch_environment(env);
  EXPECT_EQ(e.launcher, "horovod");
  expect_config(e, 1, 1, 2, "127.0.0.1", 41001);
  EXPECT_EQ(e.nnodes, 1);
  // Two nodes: horovodrun's host is taken as rank 0's, with a warning.
  env = {{"HOROVOD_RANK", "3"},
         {"HOROVOD_SIZE", "4"},
         {"HOROVOD_LOCAL_RANK", "1"},
         {"HOROVOD_LOCAL_SIZE", "2"},
         {"HOROVOD_CROSS_RANK", "1"},
         {"HOROVOD_CROSS_SIZE", "2"},
         {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.5"},
         {"HOROVOD_GLOO_RENDEZVOUS_PORT", "41000"}};
  e = kd::detect_launch_environment(env);
  expect_config(e, 3, 1, 4, "10.0.0.5", 41001);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.warnings.size(), 1u);
  EXPECT_NE(error_of({{"HOROVOD_RANK", "0"}}).find("missing HOROVOD_SIZE"), std::string::npos);
}

TEST(DetectNone, EmptyEnvironmentIsOneProcess) {
  auto e = kd::detect_launch_environment(kd::EnvMap{{"PATH", "/usr/bin"}});
  EXPECT_FALSE(e.detected());
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
}

}  // namespace
