// ZeroRedundancyOptimizer's exchanges are kindling::dist collectives: a rank that skips a step
// (no backward, so no reduce-scatter) is named by the stall monitor on every other rank within
// the stall period, and every rank's flight record says it never joined the reduce-scatter the
// others wait in (tests/dist/check_flight_record.py reads the dumps). With point-to-point
// exchanges of its own (before) the others waited the whole timeout, undiagnosed.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/dist/flight_recorder.h>
#include <kindling/error.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/zero.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "support/models.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace zero_stall_test {

constexpr int kSkipping = 2;  // the rank that skips the fourth step
constexpr double kStallSeconds = 2.0;

bool appears(const std::string& path, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (::access(path.c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return ::access(path.c_str(), F_OK) == 0;
}

// A fresh folder for the job's flight records, removed with what is in it when the object goes.
struct RecordFolder {
  std::string path;
  RecordFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kindling-zero-stall-XXXXXX").string();
    WCHECK(::mkdtemp(pattern.data()) != nullptr, << "mkdtemp " << pattern);
    path = pattern;
  }
  ~RecordFolder() { std::filesystem::remove_all(path); }
};

std::string dump_of(int rank) { return kd::flight_record_folder() + "/kindling_fr_rank_" + std::to_string(rank); }

}  // namespace zero_stall_test

// Three steps on every rank (one DDP bucket: one reduce-scatter and one all-gather a step); in
// the fourth, rank 2 neither runs backward nor steps: it dumps its record and waits, alive,
// until the others have dumped theirs on their failure.
KINDLING_WORKER(zero_skipped_exchange) {
  using zero_stall_test::kSkipping;
  const auto stall = std::chrono::milliseconds(static_cast<int64_t>(zero_stall_test::kStallSeconds * 1000));
  kd::initialize("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)).stall_timeout(stall));
  const bool overlap = std::string(std::getenv("ZERO_OVERLAP")) == "1";
  torch::manual_seed(5);
  kindling::testing::Mlp3 net;
  kn::ZeroRedundancyOptimizer optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9),
                                        kn::ZeroOptions().overlap_with_ddp(overlap));
  auto model = kd::auto_model(net, kn::DdpOptions().comm_hook(optimizer.comm_hook()).bucket_cap_mb(25));
  auto step = [&] {
    optimizer.zero_grad();
    torch::manual_seed(100 + kd::get_rank());
    torch::mse_loss(model(torch::randn({6, 12})), torch::randn({6, 4})).backward();
    optimizer.step();
  };
  for (int i = 0; i < 3; ++i) step();
  if (kd::get_rank() == kSkipping) {
    WCHECK(kd::dump_flight_record() == zero_stall_test::dump_of(kSkipping));
    for (int r = 0; r < kd::get_world_size(); ++r)
      if (r != kSkipping) zero_stall_test::appears(zero_stall_test::dump_of(r), 40);
    std::_Exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    step();
    WCHECK(false, << "a step completed without rank " << kSkipping);
  } catch (const kindling::TimeoutError& e) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string msg = e.what();
    std::cout << "ERROR after " << waited << " s: " << msg << std::endl;
    WCHECK(msg.find("kindling::dist::reduce_scatter_async") != std::string::npos, << msg);
    WCHECK(msg.find("stalled: rank " + std::to_string(kSkipping) + " ") != std::string::npos, << msg);
    WCHECK(waited < zero_stall_test::kStallSeconds + 10.0,
           << "gave up after " << waited << " s; the stall period is " << zero_stall_test::kStallSeconds << " s");
  }
  WCHECK(zero_stall_test::appears(zero_stall_test::dump_of(kd::get_rank()), 5), << "no flight record after the stall");
  std::_Exit(0);  // the group is broken: nothing to finalize with the rank that left the job
}

namespace zero_stall_test {

class ZeroStall : public ::testing::TestWithParam<bool> {};

TEST_P(ZeroStall, ARankThatSkipsTheExchangeIsNamedByTheStallVerdictAndTheFlightRecord) {
  RecordFolder dir;
  LaunchOptions opts;
  opts.world_size = 3;
  opts.deadline = std::chrono::seconds(60);
  opts.env["ZERO_OVERLAP"] = GetParam() ? "1" : "0";
  opts.env["KINDLING_FLIGHT_RECORD_DIR"] = dir.path;
  auto results = run_workers("zero_skipped_exchange", opts);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << describe(results);
  const auto checked = kindling::testing::run_command(
      {KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/dist/check_flight_record.py", "missing", dir.path, "3", "gloo",
       std::to_string(kSkipping), "next", "_reduce_scatter_base"},
      {}, std::chrono::seconds(120));
  EXPECT_TRUE(checked.ok()) << checked.out << checked.err;
  std::cout << checked.out;
}

INSTANTIATE_TEST_SUITE_P(Overlap, ZeroStall, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("overlap_with_ddp") : std::string("after_backward");
                         });

}  // namespace zero_stall_test
