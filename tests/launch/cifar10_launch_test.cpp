// examples/cifar10, the main job, at a small size under every launcher: one process (no
// backend), kindling-run, torchrun, mpirun (gloo and mpi) and srun (the Slurm daemons are
// started by the CTest fixture). Parallel's own 2 processes: tests/examples/check_cifar10_resume.sh. Each run must train, evaluate,
// print the results table and write summary.json in its run folder for 2 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "launch/launchers.h"
#include "support/multiprocess.h"

using kindling::testing::describe;
using kindling::testing::RankResult;
using kindling::testing::run_command;
using Strings = std::vector<std::string>;

namespace {

const std::string kCifar10 = CIFAR10_PATH;

// A new output folder and the example's flags for a run of a few seconds.
Strings small_run(const std::string& output) {
  return {"--output_path", output,     "--train_subset", "256", "--test_subset", "128", "--batch_size", "64",
          "--num_epochs",  "1",        "--num_workers",  "1",   "--log_every_iters", "2"};
}

std::string new_output() {
  char pattern[] = "/tmp/kindling-cifar10-XXXXXX";
  return mkdtemp(pattern);
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Checks the run: exit 0, the table on stdout, one run folder named after the backend and
// world size, holding summary.json, the report and a TensorBoard file.
void expect_trained(const RankResult& r, const std::string& output, const std::string& backend, int world_size) {
  ASSERT_TRUE(r.ok()) << describe({r});
  EXPECT_NE(r.out.find("| epoch | train accuracy | train loss | test accuracy | test loss |"), std::string::npos)
      << describe({r});
  std::vector<std::filesystem::path> runs;
  for (const auto& entry : std::filesystem::directory_iterator(output)) runs.push_back(entry.path());
  ASSERT_EQ(runs.size(), 1u) << "one run folder in " << output;
  const std::string name = runs[0].filename().string();
  EXPECT_EQ(name.rfind("resnet18_backend-" + backend + "-" + std::to_string(world_size) + "_", 0), 0u) << name;
  EXPECT_NE(r.out.find("Output folder: " + runs[0].string()), std::string::npos) << describe({r});
  const std::string summary = read((runs[0] / "summary.json").string());
  EXPECT_NE(summary.find("\"world_size\": " + std::to_string(world_size)), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"backend\": \"" + backend + "\""), std::string::npos) << summary;
  EXPECT_TRUE(std::filesystem::exists(runs[0] / "report.html"));
  bool tensorboard = false;
  for (const auto& entry : std::filesystem::directory_iterator(runs[0])) {
    tensorboard |= entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(tensorboard) << "no TensorBoard event file in " << runs[0];
  std::filesystem::remove_all(output);
}

Strings with(Strings head, const Strings& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

const auto kLimit = std::chrono::seconds(240);

}  // namespace

TEST(Cifar10, OneProcessWithoutBackend) {
  const std::string out = new_output();
  auto r = run_command(with({kCifar10}, small_run(out)), {}, kLimit);
  expect_trained(r, out, "none", 1);
}

TEST(Cifar10, UnderKindlingRun) {
  const std::string out = new_output();
  auto r = run_command(with({KINDLING_RUN_PATH, "--nproc_per_node", "2", kCifar10}, small_run(out)), {}, kLimit);
  expect_trained(r, out, "gloo", 2);
}

TEST(Cifar10, UnderTorchrun) {
  const std::string out = new_output();
  auto r = run_command(
      kindling::testing::torchrun(with({"--standalone", "--nproc_per_node", "2", "--no_python", kCifar10}, small_run(out))),
      {}, kLimit);
  expect_trained(r, out, "gloo", 2);
}

TEST(Cifar10, UnderMpirunWithGlooAndWithMpi) {
  for (const std::string backend : {"gloo", "mpi"}) {
    const std::string out = new_output();
    auto r = run_command(
        with({"/usr/bin/mpirun", "--oversubscribe", "-np", "2", kCifar10, "--backend", backend}, small_run(out)),
        kindling::testing::mpirun_env(), kLimit);
    expect_trained(r, out, backend, 2);
  }
}

TEST(Cifar10, UnderSrun) {
  const std::string out = new_output();
  auto r = run_command(with({"/usr/bin/srun", "-n", "2", "--time", "4", kCifar10}, small_run(out)),
                       kindling::testing::slurm_env(), kLimit);
  expect_trained(r, out, "gloo", 2);
}

TEST(Cifar10, MissingDataPathIsAClearErrorOnEveryRank) {
  const std::string out = new_output();
  auto r = run_command(
      with({kCifar10, "--nproc_per_node", "2", "--data_path", "/nonexistent/cifar"}, small_run(out)), {}, kLimit);
  EXPECT_EQ(r.exit_code, 1) << describe({r});
  const std::string message = "--data_path '/nonexistent/cifar' is not a folder";
  // Both ranks say it (each checks before anything is read), and the parent reports it.
  std::size_t count = 0;
  for (std::size_t at = r.err.find(message); at != std::string::npos; at = r.err.find(message, at + 1)) ++count;
  EXPECT_GE(count, 2u) << describe({r});
  std::filesystem::remove_all(out);
}

TEST(Cifar10, DamagedDataIsReportedByEveryRank) {
  // A CIFAR-10 folder whose first training file is cut short: rank 0 finds it while reading
  // and tells rank 1, so both fail with the file's name instead of rank 1 waiting.
  const std::string out = new_output(), data = new_output();
  for (const std::string name : {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                                 "data_batch_5.bin", "test_batch.bin"}) {
    std::ofstream(data + "/" + name) << std::string(name == "data_batch_1.bin" ? 100 : 3073, '\1');
  }
  auto r = run_command(with({kCifar10, "--nproc_per_node", "2", "--data_path", data}, small_run(out)), {}, kLimit);
  EXPECT_EQ(r.exit_code, 1) << describe({r});
  const std::string message = "the data in '" + data + "' could not be read (rank 0)";
  std::size_t count = 0;
  for (std::size_t at = r.err.find(message); at != std::string::npos; at = r.err.find(message, at + 1)) ++count;
  EXPECT_GE(count, 2u) << describe({r});
  EXPECT_NE(r.err.find("data_batch_1.bin"), std::string::npos) << describe({r});
  std::filesystem::remove_all(out);
  std::filesystem::remove_all(data);
}
