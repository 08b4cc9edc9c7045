// DdpOptions::autotune_bucket_cap_mb: each size for its steps, in order, on every rank alike;
// the best score stays; the training equals one with a fixed size (bit for bit on 2 ranks);
// misuse refused. Real processes on every distributed backend of the build.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/dist.h>
#include <kindling/error.h>
#include <kindling/nn/ddp.h>
#include <kindling/nn/powersgd.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/backend_world_test.h"
#include "support/models.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;

namespace ddp_autotune_test {

using Net = kindling::testing::Mlp3;

// Trains `steps` steps; returns the weights and, per step, the bucket size StepTimes reports.
std::pair<torch::Tensor, std::vector<double>> train(kn::DdpOptions options, int steps,
                                                    std::vector<kn::BucketTrial>* scores = nullptr,
                                                    double* chosen = nullptr) {
  torch::manual_seed(4);
  auto model = kd::auto_model(Net(), options);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  std::vector<double> sizes;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    torch::manual_seed(100 + 10 * step + kd::get_rank());
    torch::mse_loss(model(torch::randn({5, 12})), torch::randn({5, 4})).backward();
    opt.step();
    sizes.push_back(model.reducer()->last_step_times().bucket_cap_mb);
  }
  if (scores) *scores = model.reducer()->bucket_autotune();
  if (chosen) *chosen = model.reducer()->bucket_cap_mb();
  std::vector<torch::Tensor> flat;
  for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape({-1}).clone());
  return {torch::cat(flat), sizes};
}

KINDLING_WORKER(ddp_autotune_tries_each_size) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  const std::vector<double> sizes{0.001, 0.01, 1.0};
  const int per_size = 3, steps = 1 + 3 * per_size + 2;
  std::vector<kn::BucketTrial> scores;
  double chosen = 0;
  const auto [tuned, used] = train(kn::DdpOptions().autotune_bucket_cap_mb(sizes).autotune_steps(per_size), steps,
                                   &scores, &chosen);
  // Step 1 (index 0) used the default size; then each size for its steps; then the best.
  WCHECK(used[0] == 25.0, << "first step: " << used[0]);
  for (int k = 0; k < 3 * per_size; ++k)
    WCHECK(used[1 + k] == sizes[k / per_size], << "step " << 2 + k << " used " << used[1 + k]);
  WCHECK(scores.size() == sizes.size(), << scores.size() << " scores");
  const auto best = std::min_element(scores.begin(), scores.end(), [](const auto& x, const auto& y) {
    return x.step_seconds < y.step_seconds;
  });
  WCHECK(chosen == best->bucket_cap_mb && used.back() == chosen, << "chose " << chosen << ", last step used "
                                                                  << used.back() << ", best " << best->bucket_cap_mb);
  for (std::size_t i = 0; i < scores.size(); ++i)
    WCHECK(scores[i].bucket_cap_mb == sizes[i] && scores[i].step_seconds > 0, << "score " << i);
  // Every rank scored alike and chose alike (the slowest rank's medians).
  std::vector<double> mine{chosen};
  for (const auto& s : scores) mine.push_back(s.step_seconds);
  const auto all = kd::all_gather(torch::tensor(mine, torch::kDouble).unsqueeze(0));
  for (int r = 0; r < kd::get_world_size(); ++r)
    WCHECK(torch::equal(all[r], all[0]), << "rank " << r << "'s scores differ from rank 0's");
  // The same arithmetic as a fixed size (the sizes change only how the gradients are grouped).
  const auto fixed = train(kn::DdpOptions().bucket_cap_mb(0.01), steps).first;
  if (kd::get_world_size() == 2) {
    WCHECK(torch::equal(tuned, fixed), << "max difference " << (tuned - fixed).abs().max().item<double>());
  } else {
    WCHECK(torch::allclose(tuned, fixed, 0, 1e-6), << "max difference " << (tuned - fixed).abs().max().item<double>());
  }
  kd::finalize();
}

KINDLING_WORKER(ddp_autotune_refuses_misuse) {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
  auto message_of = [](const kn::DdpOptions& o) {
    try {
      kd::auto_model(Net(), o);
    } catch (const kindling::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  auto m = message_of(kn::DdpOptions().autotune_bucket_cap_mb({5, 0}));
  WCHECK(m.find("every size must be positive, got 0") != std::string::npos, << m);
  m = message_of(kn::DdpOptions().autotune_bucket_cap_mb({5, 25}).autotune_steps(1));
  WCHECK(m.find("autotune_steps must be at least 2") != std::string::npos, << m);
  m = message_of(kn::DdpOptions().autotune_bucket_cap_mb({5, 25}).comm_hook(kn::fp16_compress_hook()));
  WCHECK(m.find("not with a comm_hook ('fp16_compress')") != std::string::npos, << m);
  kd::finalize();
}

class DdpAutotuneTest : public kindling::testing::BackendWorldTest {};
TEST_P(DdpAutotuneTest, TriesEachSizeAndKeepsTheBest) { expect_ok("ddp_autotune_tries_each_size"); }
INSTANTIATE_TEST_SUITE_P(Backends, DdpAutotuneTest,
                         ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// Local checks: one backend, two ranks are enough.
TEST(DdpAutotune, RefusesMisuse) {
  kindling::testing::LaunchOptions opts;
  auto results = kindling::testing::run_workers("ddp_autotune_refuses_misuse", opts);
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kindling::testing::describe(results);
}

}  // namespace ddp_autotune_test
