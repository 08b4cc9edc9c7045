// DistributedDataParallel: averaged gradients equal full-batch gradients of one process,
// replicas stay identical over optimizer steps, unused parameters, no_sync, serial.
// Real processes (support/multiprocess.h) on every distributed backend of the build.
#include <gtest/gtest.h>
#include <kindling/dist/auto.h>
#include <kindling/kindling.h>
#include <kindling/nn/ddp.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "support/backend_world_test.h"
#include "support/multiprocess.h"

namespace kd = kindling::dist;
using kindling::testing::describe;
using kindling::testing::LaunchOptions;
using kindling::testing::run_workers;

namespace {

constexpr int kLocalBatch = 8;

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(bool with_never = true) {
    fc1 = register_module("fc1", torch::nn::Linear(20, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 5));
    extra = register_module("extra", torch::nn::Linear(64, 5));
    if (with_never) never = register_module("never", torch::nn::Linear(64, 5));
  }
  // `use_extra`: whether the `extra` head takes part; `never` never does.
  torch::Tensor forward(torch::Tensor x, bool use_extra = true) {
    auto h = torch::relu(fc2(torch::relu(fc1(x))));
    auto out = fc3(h);
    return use_extra ? out + extra(h) : out;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, extra{nullptr}, never{nullptr};
};
TORCH_MODULE(Mlp);

Mlp seeded_model(bool with_never = true) {
  torch::manual_seed(1234);
  return Mlp(with_never);
}

// The global batch every rank can rebuild: rows [r * kLocalBatch, (r + 1) * kLocalBatch) are rank r's.
std::pair<torch::Tensor, torch::Tensor> global_batch(int world, int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({world * kLocalBatch, 20}), torch::randn({world * kLocalBatch, 5})};
}

torch::Tensor rows(const torch::Tensor& t, int rank) { return t.narrow(0, rank * kLocalBatch, kLocalBatch); }

void initialize() {
  kd::initialize(kindling::testing::test_backend(), kd::InitOptions().timeout(std::chrono::seconds(60)));
}

// Exact equality of `t` on all ranks.
bool identical_everywhere(const torch::Tensor& t) {
  auto hi = kd::all_reduce(t.detach().clone(), kd::ReduceOp::kMax);
  auto lo = kd::all_reduce(t.detach().clone(), kd::ReduceOp::kMin);
  return torch::equal(hi, lo);
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  WCHECK(a.defined() && b.defined(), << what << ": undefined gradient");
  WCHECK(torch::allclose(a, b, 1e-5, 1e-6), << what << ": max difference " << (a - b).abs().max().item<double>());
}

KINDLING_WORKER(ddp_matches_full_batch) {
  initialize();
  const int rank = kd::get_rank(), world = kd::get_world_size();
  auto model = kd::auto_model(seeded_model(false), kindling::nn::DdpOptions().bucket_cap_mb(0.001));
  WCHECK(model.reducer() != nullptr);
  const auto buckets = model.reducer()->buckets();
  WCHECK(buckets.size() >= 3, << buckets.size() << " buckets");
  WCHECK(buckets.front().front() == "extra.bias", << "reverse registration order: " << buckets.front().front());
  Mlp reference = seeded_model(false);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = global_batch(world, 100 + step);
    opt.zero_grad();
    ref_opt.zero_grad();
    torch::mse_loss(model(rows(x, rank)), rows(y, rank)).backward();
    torch::mse_loss(reference(x), y).backward();
    auto p = model->named_parameters();
    auto q = reference->named_parameters();
    for (const auto& item : p) {
      expect_close(item.value().grad(), q[item.key()].grad(), "step " + std::to_string(step) + " grad " + item.key());
    }
    opt.step();
    ref_opt.step();
  }
  for (const auto& item : model->named_parameters()) {
    expect_close(item.value(), reference->named_parameters()[item.key()], "parameter " + item.key());
    WCHECK(identical_everywhere(item.value()), << item.key() << " differs across ranks");
  }
  WCHECK(model.reducer()->synchronized_backwards() == 5);
  kd::finalize();
}

// `never` gets no gradient anywhere: without find_unused_parameters every rank says so.
KINDLING_WORKER(ddp_unused_parameter_error) {
  initialize();
  auto model = kd::auto_model(seeded_model());
  auto [x, y] = global_batch(kd::get_world_size(), 7);
  std::string what;
  try {
    torch::mse_loss(model(rows(x, kd::get_rank())), rows(y, kd::get_rank())).backward();
  } catch (const std::exception& e) {
    what = e.what();
  }
  WCHECK(
      what.find("2 parameter(s) got no gradient in this backward: never.bias, never.weight") != std::string::npos ||
          what.find("2 parameter(s) got no gradient in this backward: never.weight, never.bias") != std::string::npos,
      << what);
  WCHECK(what.find("find_unused_parameters(true)") != std::string::npos, << what);
  kd::finalize();
}

// `extra` is used on rank 0 only and `never` nowhere, with find_unused_parameters.
KINDLING_WORKER(ddp_find_unused) {
  initialize();
  const int rank = kd::get_rank(), world = kd::get_world_size();
  auto model =
      kd::auto_model(seeded_model(), kindling::nn::DdpOptions().find_unused_parameters(true).bucket_cap_mb(0.01));
  auto [x, y] = global_batch(world, 11);
  torch::mse_loss(model(rows(x, rank), /*use_extra=*/rank == 0), rows(y, rank)).backward();
  // Reference: the average over ranks of each rank's local gradient, computed here for all ranks.
  Mlp reference = seeded_model();
  for (int r = 0; r < world; ++r) {
    (torch::mse_loss(reference(rows(x, r), r == 0), rows(y, r)) / world).backward();
  }
  for (const auto& item : model->named_parameters()) {
    // A copy: named_parameters() returns a temporary dictionary (TSan found the dangling reference).
    const at::Tensor ref = reference->named_parameters()[item.key()];
    if (item.key().rfind("never", 0) == 0) {
      WCHECK(!item.value().grad().defined(), << item.key() << " was used by no rank and must keep no gradient");
      continue;
    }
    expect_close(item.value().grad(), ref.grad(), "grad " + item.key());
    WCHECK(identical_everywhere(item.value().grad()), << item.key());
  }
  kd::finalize();
}

// Gradient accumulation: a micro-batch under no_sync, then a synchronised one.
KINDLING_WORKER(ddp_no_sync) {
  initialize();
  const int rank = kd::get_rank(), world = kd::get_world_size();
  auto model = kd::auto_model(seeded_model(), kindling::nn::DdpOptions().find_unused_parameters(true));
  auto [x1, y1] = global_batch(world, 21);
  auto [x2, y2] = global_batch(world, 22);
  {
    auto guard = model.no_sync();
    torch::mse_loss(model(rows(x1, rank)), rows(y1, rank)).backward();
  }
  WCHECK(model.reducer()->synchronized_backwards() == 0);
  WCHECK(model.reducer()->last_sync_wait_seconds() == 0.0, << "no synchronised backward has waited yet");
  // The last rank comes 1 s late: rank 0's all-reduces cannot end before it contributes, and
  // rank 0's own forward and backward take about a millisecond (half a second of margin for load).
  if (rank == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  torch::mse_loss(model(rows(x2, rank)), rows(y2, rank)).backward();
  WCHECK(model.reducer()->synchronized_backwards() == 1);
  if (rank == 0) {
    WCHECK(model.reducer()->last_sync_wait_seconds() >= 0.5,
           << "waited " << model.reducer()->last_sync_wait_seconds() << " s for a rank 1 s late");
  }
  Mlp reference = seeded_model();
  for (int r = 0; r < world; ++r) {
    ((torch::mse_loss(reference(rows(x1, r)), rows(y1, r)) + torch::mse_loss(reference(rows(x2, r)), rows(y2, r))) /
     world)
        .backward();
  }
  for (const auto& item : model->named_parameters()) {
    if (item.key().rfind("never", 0) == 0) continue;
    expect_close(item.value().grad(), reference->named_parameters()[item.key()].grad(), "grad " + item.key());
  }
  kd::finalize();
}

// A linear layer scaled by a buffer: a model with a buffer whose output does not depend on
// batch statistics, so local gradients average to the full batch's.
struct ScaledImpl : torch::nn::Module {
  ScaledImpl() {
    fc = register_module("fc", torch::nn::Linear(20, 5));
    scale = register_buffer("scale", torch::full({5}, 2.0));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(x) * scale; }
  torch::nn::Linear fc{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(Scaled);

// As torch's DDP: a forward without gradients does not communicate, so rank 0 can evaluate
// alone through the wrapper while the other ranks wait; a training forward still broadcasts
// the buffers from rank 0 and training still gives one process's full-batch gradients.
KINDLING_WORKER(ddp_no_grad_forward_is_local) {
  initialize();
  const int rank = kd::get_rank(), world = kd::get_world_size();
  torch::manual_seed(4);
  auto model = kd::auto_model(Scaled());
  if (rank == 0) {
    torch::NoGradGuard no_grad;
    for (int i = 0; i < 3; ++i) WCHECK(model(torch::randn({2, 20})).size(0) == 2);
  }
  kd::barrier();
  if (rank != 0) model->scale.fill_(-1.0);  // a training forward must restore rank 0's buffer
  torch::manual_seed(4);
  Scaled reference;
  auto [x, y] = global_batch(world, 21);
  torch::mse_loss(model(rows(x, rank)), rows(y, rank)).backward();
  torch::mse_loss(reference(x), y).backward();
  WCHECK(torch::equal(model->scale, reference->scale), << "buffer not broadcast: " << model->scale);
  auto q = reference->named_parameters();
  for (const auto& item : model->named_parameters())
    expect_close(item.value().grad(), q[item.key()].grad(), item.key());
  kd::finalize();
}

// StepTimes: rank 1 starts its backward 1 s late, so the others wait at least 0.5 s for the
// reductions after their own backward (a margin for a loaded machine: a rank of theirs may
// itself be held up to 0.5 s); the parts add up to no more than the
// step measured around them; the pause between steps is counted; an evaluation forward (no
// grad) starts no step.
KINDLING_WORKER(ddp_step_times) {
  initialize();
  const int rank = kd::get_rank(), world = kd::get_world_size();
  auto model = kd::auto_model(seeded_model(false));
  auto [x, y] = global_batch(world, 8);
  using Clock = std::chrono::steady_clock;
  WCHECK(model.reducer()->last_step_times().step == 0);
  for (int step = 1; step <= 2; ++step) {
    kd::barrier();
    if (step == 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // "the optimizer"
    const auto start = Clock::now();
    auto loss = torch::mse_loss(model(rows(x, rank)), rows(y, rank));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    loss.backward();
    const double total = std::chrono::duration<double>(Clock::now() - start).count();
    const auto t = model.reducer()->last_step_times();
    WCHECK(t.step == step, << t.step);
    const double parts = t.forward + t.backward + t.communication_wait + t.write_back;
    WCHECK(t.forward > 0 && t.backward > 0 && t.write_back >= 0 && parts <= total,
           << "forward " << t.forward << " backward " << t.backward << " wait " << t.communication_wait << " write "
           << t.write_back << " total " << total);
    if (rank == 1) {
      WCHECK(t.backward >= 1.0, << "rank 1's backward includes its pause: " << t.backward);
    } else {
      WCHECK(t.communication_wait >= 0.5, << "rank " << rank << " waited " << t.communication_wait);
    }
    if (step == 2) WCHECK(t.between_steps >= 0.1, << "between steps: " << t.between_steps);
    if (step == 1) WCHECK(t.between_steps == 0, << t.between_steps);
  }
  {
    torch::NoGradGuard no_grad;
    model(rows(x, rank));
  }
  WCHECK(model.reducer()->last_step_times().step == 2);
  kd::finalize();
}

// Each built-in hook gives the compressed-then-averaged reference: every rank's own gradient
// (computed here by one process), cast to the hook's dtype, divided by the world size, summed
// (in that dtype: exact for 2 ranks up to the order of 3), cast back; compression really
// happens (some value differs from the float32 average).
KINDLING_WORKER(ddp_comm_hooks) {
  initialize();
  const int rank = kd::get_rank(), world = kd::get_world_size();
  struct Case {
    std::shared_ptr<kindling::nn::CommHook> hook;
    std::optional<at::ScalarType> dtype;
    double eps;  // the dtype's machine epsilon
  };
  const std::vector<Case> cases = {{kindling::nn::allreduce_hook(), std::nullopt, 1.2e-7},
                                   {kindling::nn::fp16_compress_hook(), at::kHalf, 9.8e-4},
                                   {kindling::nn::bf16_compress_hook(), at::kBFloat16, 7.9e-3}};
  for (const auto& c : cases) {
    auto model = kd::auto_model(seeded_model(false), kindling::nn::DdpOptions().bucket_cap_mb(0.001).comm_hook(c.hook));
    Mlp reference = seeded_model(false);
    auto [x, y] = global_batch(world, 300);
    torch::mse_loss(model(rows(x, rank)), rows(y, rank)).backward();
    std::map<std::string, torch::Tensor> expected, exact, magnitude;
    for (int r = 0; r < world; ++r) {
      reference->zero_grad();
      torch::mse_loss(reference(rows(x, r)), rows(y, r)).backward();
      for (const auto& item : reference->named_parameters()) {
        const auto g = item.value().grad().detach();
        const auto part = c.dtype ? (g.to(*c.dtype) / world).to(at::kFloat) : g / world;
        expected[item.key()] = expected.count(item.key()) ? expected[item.key()] + part : part;
        exact[item.key()] = exact.count(item.key()) ? exact[item.key()] + g / world : g / world;
        magnitude[item.key()] = magnitude.count(item.key()) ? magnitude[item.key()] + part.abs() : part.abs();
      }
    }
    bool compressed = false;
    for (const auto& item : model->named_parameters()) {
      const auto got = item.value().grad();
      const auto want = c.dtype ? expected[item.key()].to(*c.dtype).to(at::kFloat) : expected[item.key()];
      // The engine may sum in another order: one rounding per addition, each within an
      // epsilon of the running magnitude.
      const auto bound = magnitude[item.key()] * (world * c.eps) + 1e-7;
      WCHECK(((got - want).abs() <= bound).all().item<bool>(),
             << c.hook->name() << " " << item.key() << ": max difference " << (got - want).abs().max().item<double>());
      compressed = compressed || !torch::equal(got, exact[item.key()]);
    }
    WCHECK(!c.dtype || compressed, << c.hook->name() << ": every gradient equals the float32 average");
  }
  kd::finalize();
}

// The last rank is given the fp16 hook and another bucket size: every rank refuses at
// construction, naming the options and the values, instead of stalling at the first backward.
KINDLING_WORKER(ddp_options_disagree) {
  initialize();
  const bool odd = kd::get_rank() == kd::get_world_size() - 1;
  auto options = kindling::nn::DdpOptions();
  if (odd) options.comm_hook(kindling::nn::fp16_compress_hook()).bucket_cap_mb(5);
  std::string what;
  try {
    auto model = kd::auto_model(seeded_model(false), options);
  } catch (const kindling::UsageError& e) {
    what = e.what();
  }
  const std::string last = std::to_string(kd::get_world_size() - 1);
  WCHECK(what.find("the ranks were given different settings (rank " + last +
                   " has bucket_cap_mb=5 but rank 0 has "
                   "bucket_cap_mb=25; rank " +
                   last + " has comm_hook=" + kindling::nn::fp16_compress_hook()->name() +
                   " but rank 0 has comm_hook=none)") != std::string::npos,
         << what);
  kd::finalize();
}

class DdpTest : public kindling::testing::BackendWorldTest {};

TEST_P(DdpTest, GradientsEqualFullBatchAndReplicasStayIdentical) { expect_ok("ddp_matches_full_batch"); }
TEST_P(DdpTest, UnusedParameterIsNamedWithoutFindUnused) { expect_ok("ddp_unused_parameter_error"); }
TEST_P(DdpTest, FindUnusedParameters) { expect_ok("ddp_find_unused"); }
TEST_P(DdpTest, NoSyncAccumulates) { expect_ok("ddp_no_sync"); }
TEST_P(DdpTest, NoGradForwardDoesNotCommunicate) { expect_ok("ddp_no_grad_forward_is_local"); }
TEST_P(DdpTest, CommHooksGiveTheCompressedAverage) { expect_ok("ddp_comm_hooks"); }
TEST_P(DdpTest, StepTimesShowTheCommunicationWait) { expect_ok("ddp_step_times"); }
TEST_P(DdpTest, OptionsThatDifferAcrossRanksAreRefusedOnEveryRank) { expect_ok("ddp_options_disagree"); }

INSTANTIATE_TEST_SUITE_P(Backends, DdpTest, ::testing::ValuesIn(kindling::testing::cpu_backend_world_sizes({2, 3})),
                         [](const auto& info) { return kindling::testing::backend_world_size_name(info.param); });

TEST(DdpSerial, AutoModelIsAPassThrough) {
  auto model = kd::auto_model(seeded_model());
  EXPECT_EQ(model.reducer(), nullptr);
  auto out = model(torch::ones({2, 20}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 5}));
  torch::optim::SGD opt(model->parameters(), 0.1);
  EXPECT_EQ(&kd::auto_optim(opt), &opt);
}

}  // namespace
