// bench_resnet_gpu: one training epoch of ResNet18 (torchvision's definition, 10 classes)
// on CIFAR-shaped data made here (32x32x3 normal noise, fixed seed, labels uniform in
// 0..9), held on the GPU, through kindling::dist::auto_model; resnet_gpu.py does the same
// work with torchvision.models.resnet18 in Python (scripts/bench-gpu.sh runs both).
//
//   ./bench_resnet_gpu --images 20000 --batch 256 --amp 1 --epochs 3
//
// Per epoch: SGD (lr 0.1, momentum 0.9, weight decay 5e-4) over images/batch full batches,
// timed from a CUDA synchronize to a CUDA synchronize. The first epoch is warm-up (cuDNN
// autotuning, allocator growth) and is not reported. --amp 1: float16 autocast with
// dynamic loss scaling through ATen's own GradScaler kernels (initial scale 2^16, growth
// 2 every 2000 steps, backoff 0.5), as torch.amp.GradScaler does. Prints one RESULT line
// per timed epoch: images/s, seconds, peak GPU memory allocated (MiB).
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <kindling/dist/auto.h>
#include <kindling/kindling.h>
#include <kindling/models/resnet.h>
#include <kindling/nn/ddp.h>

#include "cli/cli.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kd = kindling::dist;

namespace {

struct Options {
  int64_t images = 20000;
  int64_t batch = 256;
  int epochs = 3;
  bool amp = false;
};

// Binds every option to `o` (tools/cli/cli.h gives --help and the errors).
void describe_options(CLI::App& app, Options& o) {
  app.add_option("--images", o.images, "Images in the epoch (made on the GPU)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Images per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "Epochs; the first is warm-up")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  app.add_option("--amp", o.amp, "1: float16 autocast with dynamic loss scaling")->capture_default_str();
}

void set_autocast(bool on) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(at::kCUDA, on);
#else
  at::autocast::set_enabled(on);
#endif
  if (!on) at::autocast::clear_cache();
}

// Dynamic loss scaling with the kernels torch.amp.GradScaler calls.
struct LossScaler {
  at::Tensor scale, growth_tracker, found_inf;
  explicit LossScaler(c10::Device dev)
      : scale(at::full({}, 65536.0, at::TensorOptions().device(dev))),
        growth_tracker(at::zeros({}, at::TensorOptions().dtype(at::kInt).device(dev))),
        found_inf(at::zeros({}, at::TensorOptions().device(dev))) {}
  // Unscales the gradients; false when one is inf/nan (skip the step).
  bool unscale(const std::vector<at::Tensor>& params) {
    std::vector<at::Tensor> grads;
    for (const auto& p : params)
      if (p.grad().defined()) grads.push_back(p.grad());
    found_inf.zero_();
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, scale.reciprocal());
    return found_inf.item<float>() == 0.0f;
  }
  void update() { at::_amp_update_scale_(scale, growth_tracker, found_inf, 2.0, 0.5, 2000); }
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"one ResNet18 epoch on CIFAR-shaped data through kindling", "bench_resnet_gpu"};
  describe_options(app, o);
  if (const int rc = kindling::cli::parse(app, argc, argv); rc >= 0) return rc;
  if (o.images < o.batch) {
    std::fprintf(stderr, "bench_resnet_gpu: error: --images (%lld) must be at least --batch (%lld)\n",
                 static_cast<long long>(o.images), static_cast<long long>(o.batch));
    return 2;
  }
  if (!at::hasCUDA()) {
    std::fprintf(stderr, "bench_resnet_gpu: no CUDA device visible; this benchmark needs a GPU\n");
    return 1;
  }
  const auto dev = kd::device();
  at::globalContext().setBenchmarkCuDNN(true);
  at::manual_seed(0);
  auto gen = at::TensorOptions().device(dev);
  at::Tensor images = at::randn({o.images, 3, 32, 32}, gen);
  at::Tensor labels = at::randint(0, 10, {o.images}, gen.dtype(at::kLong));

  auto model = kd::auto_model(kindling::models::resnet18(kindling::models::ResNetOptions().num_classes(10)));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4));
  LossScaler scaler(dev);
  const auto params = model->parameters();
  const int64_t steps = o.images / o.batch;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    c10::cuda::device_synchronize();
    if (epoch == 1) c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index());
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      auto x = images.narrow(0, s * o.batch, o.batch);
      auto y = labels.narrow(0, s * o.batch, o.batch);
      opt.zero_grad();
      set_autocast(o.amp);
      auto loss = torch::nn::functional::cross_entropy(model(x), y);
      set_autocast(false);
      if (o.amp) {
        (loss.to(at::kFloat) * scaler.scale).backward();
        if (scaler.unscale(params)) opt.step();
        scaler.update();
      } else {
        loss.backward();
        opt.step();
      }
    }
    c10::cuda::device_synchronize();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (epoch == 0) continue;
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index());
    const double peak_mib =
        static_cast<double>(
            stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) /
        (1024.0 * 1024.0);
    std::printf(
        "RESULT impl=kindling model=resnet18 amp=%d batch=%lld epoch=%d images=%lld seconds=%.4f "
        "images_per_s=%.1f peak_mib=%.1f\n",
        o.amp ? 1 : 0, static_cast<long long>(o.batch), epoch, static_cast<long long>(steps * o.batch), sec,
        static_cast<double>(steps * o.batch) / sec, peak_mib);
    std::fflush(stdout);
  }
  return 0;
}
