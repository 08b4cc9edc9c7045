// DiLoCo (kindling/nn/diloco.h) on real processes: averaging every step equals DDP; DiLoCo,
// streaming DiLoCo, the warm-up and the 16-bit exchange give the weights of the papers'
// algorithm written in Python (tests/python/diloco_reference.py); each piece is synchronised
// once per period at its step; a checkpoint resumes exactly; misuse is refused.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/handlers/checkpointing/checkpoint.h>
#include <kindling/kindling.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/backend_world_test.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/models.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
namespace kn = kindling::nn;
using kindling::testing::reference_batch;
using kindling::testing::reference_mlp;

namespace {

void diloco_init() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

// One training step of `model` on this rank's rows of `step`.
template <typename Model>
void diloco_step(Model& model, torch::optim::Optimizer& optimizer, int step) {
  optimizer.zero_grad();
  auto [x, y] = reference_batch(kd::get_rank(), step);
  torch::mse_loss(model->forward(x), y).backward();
  optimizer.step();
}

double largest_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double out = 0;
  const auto pa = a.parameters(), pb = b.parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) out = std::max(out, (pa[i] - pb[i]).abs().max().item<double>());
  return out;
}

// Averaging after every plain SGD step is DDP's step: the mean of the ranks' weights after one
// step from equal weights is the step with the mean gradient.
KINDLING_WORKER(diloco_every_step_is_ddp) {
  diloco_init();
  auto ddp = kd::auto_model(reference_mlp());
  torch::optim::SGD ddp_opt(ddp->parameters(), 0.1);
  auto net = reference_mlp();
  torch::optim::SGD inner(net->parameters(), 0.1);
  kn::DiLoCo averaged(*net, inner, kn::DiLoCoOptions::local_sgd(1));
  for (int step = 0; step < 6; ++step) {
    diloco_step(ddp, ddp_opt, step);
    diloco_step(net, averaged, step);
  }
  // Float sums in another order (the mean of weights against the mean of gradients): a few ulps.
  const double diff = largest_difference(*ddp.module(), *net);
  WCHECK(diff <= 1e-6, << "averaging every step is " << diff << " away from DDP");
  WCHECK(averaged.synchronizations() == 6 && averaged.steps() == 6, << averaged.synchronizations());
  kd::finalize();
}

// The reference's configurations (tests/python/diloco_reference.py: CONFIGS).
struct ReferenceConfig {
  int steps;
  kn::DiLoCoOptions options;
  bool adamw;  // else SGD(0.1, momentum 0.9)
};

std::map<std::string, ReferenceConfig> reference_configs() {
  const auto nesterov = torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(true);
  std::map<std::string, ReferenceConfig> out;
  out["diloco"] = {9, kn::DiLoCoOptions().sync_every(3).outer(nesterov), true};
  out["streaming"] = {13, kn::DiLoCoOptions().sync_every(4).fragments(2).fragment_sync_delay(1).fragment_update_alpha(0.5),
                      true};
  out["warmup_local_sgd"] = {8, kn::DiLoCoOptions::local_sgd(2).warmup_steps(3), false};
  out["half_feedback"] = {9, kn::DiLoCoOptions().sync_every(3).fragments(3).exchange_dtype(at::kHalf).error_feedback(true),
                          false};
  return out;
}

KINDLING_WORKER(diloco_matches_reference) {
  diloco_init();
  const auto reference = kindling::testing::read_reference_values(std::getenv("KINDLING_DILOCO_REFERENCE"));
  WCHECK(!reference.empty(), << "no reference weights were written");
  for (auto& [name, config] : reference_configs()) {
    // The 16-bit sum of 3 ranks rounds in the engine's order, the reference's in rank order.
    if (config.options.exchange_dtype() == at::kHalf && kd::get_world_size() != 2) continue;
    auto net = reference_mlp();
    std::unique_ptr<torch::optim::Optimizer> inner;
    if (config.adamw) {
      inner = std::make_unique<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(0.01));
    } else {
      inner = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    }
    kn::DiLoCo optimizer(*net, *inner, config.options);
    if (config.options.warmup_steps() > 0) {
      auto model = kd::auto_model(net, kn::DdpOptions().comm_hook(optimizer.comm_hook()));
      for (int step = 0; step < config.steps; ++step) diloco_step(model, optimizer, step);
    } else {
      for (int step = 0; step < config.steps; ++step) diloco_step(net, optimizer, step);
    }
    for (const auto& item : net->named_parameters()) {
      const std::string key = name + " " + std::to_string(kd::get_rank()) + " " + item.key();
      WCHECK(reference.count(key) && static_cast<int64_t>(reference.at(key).size()) == item.value().numel(),
             << key << ": missing or of another size in the reference");
      const auto want = torch::tensor(reference.at(key)).view(item.value().sizes());
      // Seen: up to 6e-8 (an ulp of the weights: LibTorch and Python round some steps apart).
      const double diff = (item.value() - want).abs().max().item<double>();
      WCHECK(diff <= 1e-6, << key << ": " << diff << " away from the reference");
    }
  }
  kd::finalize();
}

// Which parameters hold the same values on every rank (to 1e-7; apart, they differ by more
// than 1e-5 after a step on other rows).
std::vector<bool> agreeing(torch::nn::Module& net) {
  std::vector<bool> out;
  for (const auto& p : net.parameters()) {
    const auto all = kd::all_gather(p.detach().reshape({1, -1}));
    out.push_back((all - all[0]).abs().max().item<double>() < 1e-7);
  }
  return out;
}

// Three pieces, every 6 steps, no delay: after each step the pieces whose exchange that step
// ran hold the global weights on every rank, the others this rank's own.
KINDLING_WORKER(diloco_pieces_follow_their_schedule) {
  diloco_init();
  auto net = reference_mlp();
  torch::optim::SGD inner(net->parameters(), 0.1);
  kn::DiLoCo optimizer(*net, inner, kn::DiLoCoOptions().sync_every(6).fragments(3));
  std::vector<std::vector<bool>> seen;
  for (int step = 0; step < 18; ++step) {
    diloco_step(net, optimizer, step);
    seen.push_back(agreeing(*net));
  }
  const std::size_t n = seen[0].size();
  std::map<std::vector<bool>, std::vector<int>> steps_of;  // a set of agreeing parameters -> its steps
  std::vector<int> times(n, 0);
  for (int step = 0; step < 18; ++step) {
    bool any = false;
    for (std::size_t i = 0; i < n; ++i) {
      times[i] += seen[step][i];
      any = any || seen[step][i];
    }
    if (any) steps_of[seen[step]].push_back(step + 1);
  }
  for (std::size_t i = 0; i < n; ++i) WCHECK(times[i] == 3, << "parameter " << i << " agreed " << times[i] << " times");
  WCHECK(steps_of.size() == 3, << steps_of.size() << " distinct sets of parameters were exchanged, 3 pieces expected");
  for (const auto& [set, steps] : steps_of) {
    WCHECK(steps.size() == 3 && steps[1] - steps[0] == 6 && steps[2] - steps[1] == 6 && steps[0] % 2 == 0,
           << "a piece was exchanged at steps " << steps[0] << ", " << steps[1] << ", " << steps[2]);
  }
  WCHECK(optimizer.synchronizations() == 9, << optimizer.synchronizations());
  diloco_step(net, optimizer, 18);  // every rank its own weights again
  optimizer.synchronize();
  const std::vector<bool> after = agreeing(*net);
  WCHECK(std::all_of(after.begin(), after.end(), [](bool b) { return b; }), << "synchronize() left ranks apart");
  WCHECK(optimizer.synchronizations() == 12, << optimizer.synchronizations());
  kd::finalize();
}

KINDLING_WORKER(diloco_resumes_exactly) {
  namespace kh = kindling::handlers;
  diloco_init();
  const auto options = kn::DiLoCoOptions().sync_every(4).fragments(2).fragment_sync_delay(1).fragment_update_alpha(0.5);
  auto straight = reference_mlp();
  torch::optim::AdamW straight_inner(straight->parameters(), torch::optim::AdamWOptions(0.01));
  kn::DiLoCo straight_opt(*straight, straight_inner, options);
  for (int step = 0; step < 12; ++step) diloco_step(straight, straight_opt, step);

  auto first = reference_mlp();
  torch::optim::AdamW first_inner(first->parameters(), torch::optim::AdamWOptions(0.01));
  kn::DiLoCo first_opt(*first, first_inner, options);
  for (int step = 0; step < 6; ++step) diloco_step(first, first_opt, step);  // a piece in flight
  std::optional<kindling::testing::TempDir> folder;
  if (kd::get_rank() == 0) folder.emplace("diloco");
  const std::string dir = kd::all_gather(folder ? folder->path() : std::string())[0];
  auto checkpoint = std::make_shared<kh::Checkpoint>(
      kh::Objects{{"model", kh::stateful(first.ptr())}, {"optimizer", kh::stateful(first_opt)}}, dir);
  kindling::engine::Engine engine([](kindling::engine::Engine&, const int& b) -> kindling::engine::Value { return b; });
  checkpoint->attach(engine, kindling::engine::Events::COMPLETED);
  engine.run(std::vector<int>{1});
  WCHECK(checkpoint->last_checkpoint().has_value(), << "no checkpoint was written");
  kd::barrier();  // rank 0 has written the file
  const auto file = kh::Checkpoint::load_file(*checkpoint->last_checkpoint());
  if (kd::get_rank() == 0) {
    const std::string python = std::string(KINDLING_PYTHON) + " " KINDLING_SOURCE_DIR "/tests/nn/diloco_state_in_python.py " +
                               *checkpoint->last_checkpoint() + " " + std::to_string(kd::get_world_size());
    WCHECK(std::system(python.c_str()) == 0, << "Python torch could not read the checkpoint: " << python);
  }

  auto resumed = reference_mlp();
  torch::optim::AdamW resumed_inner(resumed->parameters(), torch::optim::AdamWOptions(0.01));
  kn::DiLoCo resumed_opt(*resumed, resumed_inner, options);
  kh::Checkpoint::load_objects({{"model", kh::stateful(resumed.ptr())}, {"optimizer", kh::stateful(resumed_opt)}}, file);
  for (int step = 6; step < 12; ++step) diloco_step(resumed, resumed_opt, step);
  const double diff = largest_difference(*straight, *resumed);
  WCHECK(diff == 0, << "resumed training is " << diff << " away from the straight one");
  WCHECK(resumed_opt.synchronizations() == straight_opt.synchronizations(), << resumed_opt.synchronizations());

  auto other = reference_mlp();
  torch::optim::AdamW other_inner(other->parameters(), torch::optim::AdamWOptions(0.01));
  kn::DiLoCo other_opt(*other, other_inner, kn::DiLoCoOptions().sync_every(5));
  const std::string refused = kindling::testing::error_of([&] { other_opt.load_state_dict(file.at("optimizer").toGenericDict()); });
  WCHECK(refused.find("sync_every was 4 when saved, 5 now") != std::string::npos, << refused);
  kd::barrier();
  kd::finalize();
}

// What this host's link (KINDLING_TEST_LINK, set by tests/cluster/cluster_test.py's
// diloco_two_hosts) has sent so far.
int64_t link_bytes_sent() {
  const char* link = std::getenv("KINDLING_TEST_LINK");
  if (link == nullptr) throw std::runtime_error("KINDLING_TEST_LINK is unset: run this worker through cluster_test.py");
  std::ifstream in(std::string("/sys/class/net/") + link + "/statistics/tx_bytes");
  int64_t bytes = -1;
  in >> bytes;
  if (bytes < 0) throw std::runtime_error(std::string("cannot read the byte counter of link ") + link);
  return bytes;
}

// On hosts joined by a link: what the link sends at each step. With 2 ranks each sends its
// buffer's size per all-reduce (gloo's ring); the steps between exchanges send next to nothing.
KINDLING_WORKER(diloco_exchanges_cross_the_link_every_h) {
  diloco_init();
  torch::manual_seed(kd::get_rank());
  for (const int64_t pieces : {1, 2}) {
    torch::nn::Sequential net(torch::nn::Linear(256, 1024), torch::nn::Tanh(), torch::nn::Linear(1024, 256));
    torch::optim::SGD inner(net->parameters(), 0.01);
    kn::DiLoCo optimizer(*net, inner, kn::DiLoCoOptions().sync_every(4).fragments(pieces));
    double bytes = 0;
    for (const auto& p : net->parameters()) bytes += p.numel() * 4.0;
    const std::vector<double> piece_bytes{pieces == 1 ? bytes : 256 * 1024 * 4 + 1024 * 4, bytes - 256 * 1024 * 4 - 1024 * 4};
    kd::barrier();
    int64_t before = link_bytes_sent();
    std::vector<double> sent(14, 0.0), expected(14, 0.0);  // by step, 1..12
    for (int step = 1; step <= 12; ++step) {
      optimizer.zero_grad();
      const auto x = torch::randn({16, 256});
      torch::mse_loss(net->forward(x), x).backward();
      optimizer.step();
      // The link's shaper may still hold this rank's last packets when the collective has ended
      // here: they leave within its queue's latency (tests/cluster/cluster.py: tbf latency 50ms).
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      const int64_t now = link_bytes_sent();
      sent[step] = static_cast<double>(now - before);
      before = now;
      // Piece p is exchanged at steps where step % 4 == (p + 1) * 4 / pieces % 4.
      for (int64_t p = 0; p < pieces; ++p)
        if (step % 4 == (p + 1) * 4 / pieces % 4) expected[step] += piece_bytes[pieces == 1 ? 0 : p];
      std::cout << "DILOCO pieces=" << pieces << " step=" << step << " sent=" << sent[step]
                << " expected=" << expected[step] << std::endl;
    }
    // An exchange counts at its step and the next, should the shaper have held packets longer.
    for (int step = 1; step <= 12; ++step) {
      if (expected[step] > 0) {
        const double both = sent[step] + sent[step + 1];
        WCHECK(both >= 0.95 * expected[step] && both <= 1.2 * expected[step],
               << "pieces " << pieces << ", step " << step << ": the link sent " << both << " bytes, "
               << expected[step] << " expected for the exchange");
      } else if (expected[step - 1] == 0) {
        WCHECK(sent[step] < 0.02 * bytes, << "pieces " << pieces << ", step " << step << ": the link sent "
                                          << sent[step] << " bytes between exchanges");
      }
    }
  }
  kd::finalize();
}

// Workers are hosts (per_host): DDP's average keeps a host's ranks equal at every step, hosts
// part between exchanges and agree after each. Run on 2 hosts x 2 ranks (tests/cluster's
// diloco_two_hosts_per_host).
KINDLING_WORKER(diloco_per_host_keeps_hosts_together) {
  diloco_init();
  WCHECK(kd::get_nnodes() >= 2, << "this worker needs ranks on 2 hosts, got " << kd::get_nnodes());
  auto net = reference_mlp();
  torch::optim::SGD inner(net->parameters(), 0.1);
  kn::DiLoCo optimizer(*net, inner, kn::DiLoCoOptions().sync_every(3).per_host(true));
  auto model = kd::auto_model(net, kn::DdpOptions().comm_hook(optimizer.comm_hook()));
  const auto hosts = kd::all_gather(torch::tensor({static_cast<int64_t>(kd::get_node_rank())}));
  for (int step = 0; step < 6; ++step) {
    diloco_step(model, optimizer, step);
    std::vector<at::Tensor> flat;
    for (const auto& p : net->parameters()) flat.push_back(p.detach().reshape(-1));
    const auto all = kd::all_gather(at::cat(flat).unsqueeze(0));
    for (int64_t r = 1; r < all.size(0); ++r) {
      const double diff = (all[r] - all[0]).abs().max().item<double>();
      const bool same_host = hosts[r].item<int64_t>() == hosts[0].item<int64_t>();
      if (same_host || (step + 1) % 3 == 0) {
        WCHECK(diff < 1e-6, << "step " << step + 1 << ": rank " << r << " is " << diff << " away from rank 0");
      } else {
        WCHECK(diff > 1e-5, << "step " << step + 1 << ": rank " << r << " on another host equals rank 0 between exchanges");
      }
    }
  }
  WCHECK(optimizer.synchronizations() == 2, << optimizer.synchronizations());
  kd::finalize();
}

class DiLoCoTest : public kindling::testing::BackendWorldTest {};

TEST_P(DiLoCoTest, AveragingEveryStepIsDdp) { expect_ok("diloco_every_step_is_ddp"); }
TEST_P(DiLoCoTest, PiecesFollowTheirSchedule) { expect_ok("diloco_pieces_follow_their_schedule"); }
TEST_P(DiLoCoTest, ResumesExactlyFromACheckpoint) { expect_ok("diloco_resumes_exactly"); }

TEST_P(DiLoCoTest, GivesThePapersAlgorithmsWeights) {
  const kindling::testing::TempDir dir("diloco");
  const std::string reference = dir.path() + "/reference.txt";
  const std::string command = std::string(KINDLING_PYTHON) + " " KINDLING_SOURCE_DIR "/tests/python/diloco_reference.py " +
                              std::to_string(std::get<1>(GetParam())) + " " + reference;
  ASSERT_EQ(std::system(command.c_str()), 0) << "the Python reference failed: " << command;
  expect_ok("diloco_matches_reference", {{"KINDLING_DILOCO_REFERENCE", reference}});
}

INSTANTIATE_TEST_SUITE_P(Backends, DiLoCoTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

// Settings and uses refused in one process, before any training.
TEST(DiLoCoRules, MisuseIsRefusedWithTheFix) {
  auto net = reference_mlp();
  torch::optim::SGD inner(net->parameters(), 0.1);
  const auto refused = [&](const kn::DiLoCoOptions& o) {
    return kindling::testing::error_of([&] { kn::DiLoCo d(*net, inner, o); });
  };
  EXPECT_NE(refused(kn::DiLoCoOptions().sync_every(0)).find("sync_every must be at least 1, got 0"), std::string::npos);
  EXPECT_NE(refused(kn::DiLoCoOptions().sync_every(4).fragments(5)).find("fragments must be between 1 and sync_every (4), got 5"),
            std::string::npos);
  EXPECT_NE(refused(kn::DiLoCoOptions().sync_every(4).fragment_sync_delay(4)).find("fragment_sync_delay must be between 0 and"),
            std::string::npos);
  EXPECT_NE(refused(kn::DiLoCoOptions().fragment_update_alpha(1.5)).find("fragment_update_alpha must be between 0 and 1, got 1.5"),
            std::string::npos);
  EXPECT_NE(refused(kn::DiLoCoOptions().exchange_dtype(at::kDouble)).find("exchange_dtype must be float32, bfloat16 or float16, got Double"),
            std::string::npos);
  EXPECT_NE(refused(kn::DiLoCoOptions().outer(torch::optim::AdagradOptions(0.1))).find("SGDOptions, AdamOptions or AdamWOptions"),
            std::string::npos);
  EXPECT_NE(refused(kn::DiLoCoOptions().sync_every(10).fragments(7)).find("fragments (7) exceeds the parameters stepped (6)"),
            std::string::npos);
  auto stranger = reference_mlp();
  torch::optim::SGD elsewhere(stranger->parameters(), 0.1);
  EXPECT_NE(kindling::testing::error_of([&] { kn::DiLoCo d(*net, elsewhere); }).find("are not the module's"), std::string::npos);

  kn::DiLoCo optimizer(*net, inner, kn::DiLoCoOptions().sync_every(2));
  static_cast<torch::optim::SGDOptions&>(inner.param_groups()[0].options()).lr(0.5);
  const std::string behind = kindling::testing::error_of([&] { optimizer.step(); });
  EXPECT_NE(behind.find("learning rate of group 0 was changed behind DiLoCo (0.1 given, 0.5 found)"), std::string::npos)
      << behind;
  static_cast<torch::optim::SGDOptions&>(optimizer.param_groups()[0].options()).lr(0.25);
  static_cast<torch::optim::SGDOptions&>(inner.param_groups()[0].options()).lr(0.1);
  optimizer.step();  // the scheduled rate reaches the inner optimizer
  EXPECT_EQ(static_cast<torch::optim::SGDOptions&>(inner.param_groups()[0].options()).lr(), 0.25);
  torch::serialize::OutputArchive archive;
  EXPECT_NE(kindling::testing::error_of([&] { optimizer.save(archive); }).find("save state_dict()"), std::string::npos);
}

}  // namespace
