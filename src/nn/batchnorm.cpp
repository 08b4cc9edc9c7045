// kindling::nn::BatchNorm2d and its synchronized mode (see include/kindling/nn/batchnorm.h).
#include "kindling/nn/batchnorm.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>

#include <sstream>

#include "kindling/dist/dist.h"
#include "kindling/error.h"

namespace kindling {
namespace nn {

namespace {

struct GroupCapsule : torch::CustomClassHolder {
  explicit GroupCapsule(dist::Group g) : group(std::move(g)) {}
  dist::Group group;
};

/// Batch normalization with the statistics of the whole group's batch. Forward: each rank's
/// per-channel mean, M2 and count are all-gathered and combined (Chan et al.'s parallel
/// variance, stable for any means). Backward: the per-channel sums of dy and dy*xhat are
/// all-reduced, so each rank's input gradient is the one the whole batch would give; the
/// weight and bias gradients stay local (DistributedDataParallel averages them).
struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, dist::Group group, at::Tensor* mean_out,
                            at::Tensor* var_out, double* count_out) {
    const int64_t channels = input.size(1);
    const std::vector<int64_t> dims{0, 2, 3};
    const double local_count = static_cast<double>(input.numel() / std::max<int64_t>(channels, 1));
    at::Tensor local_var, local_mean;
    if (local_count > 0) {
      std::tie(local_var, local_mean) = at::var_mean(input, dims, /*unbiased=*/false);
    } else {
      local_var = at::zeros({channels}, input.options());
      local_mean = at::zeros({channels}, input.options());
    }
    // [mean (C), M2 (C), count] per rank, in double for the combination.
    at::Tensor packed = at::cat({local_mean.to(at::kDouble), (local_var.to(at::kDouble) * local_count),
                                 at::full({1}, local_count, input.options().dtype(at::kDouble))});
    at::Tensor all = dist::all_gather(packed, group).view({-1, 2 * channels + 1});
    at::Tensor counts = all.narrow(1, 2 * channels, 1);  // [ws, 1]
    const double n = counts.sum().item<double>();
    KINDLING_CHECK(n > 1,
                   "kindling::nn::BatchNorm2d (synchronized): expected more than 1 value per channel across "
                   "the group's batch, got ",
                   n, " (input size ", input.sizes(), " on this rank)");
    at::Tensor means = all.narrow(1, 0, channels);
    at::Tensor m2s = all.narrow(1, channels, channels);
    at::Tensor mean = (means * counts).sum(0) / n;
    at::Tensor m2 = (m2s + counts * (means - mean).pow(2)).sum(0);
    at::Tensor var = m2 / n;
    at::Tensor invstd = (var + eps).rsqrt();

    at::Tensor mean_c = mean.to(input.scalar_type());
    at::Tensor invstd_c = invstd.to(input.scalar_type());
    at::Tensor xhat = (input - mean_c.view({1, -1, 1, 1})) * invstd_c.view({1, -1, 1, 1});
    at::Tensor output = xhat;
    if (weight.defined()) output = output * weight.view({1, -1, 1, 1}) + bias.view({1, -1, 1, 1});

    ctx->save_for_backward({input, weight, mean_c, invstd_c});
    ctx->saved_data["count"] = n;
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(std::move(group)));
    *mean_out = mean_c;
    *var_out = var.to(input.scalar_type());
    *count_out = n;
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double n = ctx->saved_data["count"].toDouble();
    auto capsule = ctx->saved_data["group"].toCapsule();
    const dist::Group& group = static_cast<GroupCapsule*>(capsule.get())->group;
    at::Tensor grad_out = grads[0].contiguous();
    const int64_t channels = input.size(1);
    const std::vector<int64_t> dims{0, 2, 3};

    at::Tensor xhat = (input - mean.view({1, -1, 1, 1})) * invstd.view({1, -1, 1, 1});
    at::Tensor sum_dy = grad_out.sum(dims);
    at::Tensor sum_dy_xhat = (grad_out * xhat).sum(dims);
    at::Tensor packed = dist::all_reduce(at::cat({sum_dy, sum_dy_xhat}), dist::ReduceOp::kSum, group);
    at::Tensor g_sum_dy = packed.narrow(0, 0, channels);
    at::Tensor g_sum_dy_xhat = packed.narrow(0, channels, channels);
    at::Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight;
    at::Tensor grad_input = scale.view({1, -1, 1, 1}) * (grad_out - (g_sum_dy / n).view({1, -1, 1, 1}) -
                                                         xhat * (g_sum_dy_xhat / n).view({1, -1, 1, 1}));
    at::Tensor grad_weight = weight.defined() ? sum_dy_xhat : at::Tensor();
    at::Tensor grad_bias = weight.defined() ? sum_dy : at::Tensor();
    return {grad_input, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

BatchNorm2dImpl::BatchNorm2dImpl(const torch::nn::BatchNormOptions& options_) : options(options_) { reset(); }

void BatchNorm2dImpl::reset() {
  if (options.affine()) {
    weight = register_parameter("weight", at::empty({options.num_features()}));
    bias = register_parameter("bias", at::empty({options.num_features()}));
  } else {
    weight = register_parameter("weight", at::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", at::Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", at::zeros({options.num_features()}));
    running_var = register_buffer("running_var", at::ones({options.num_features()}));
    num_batches_tracked = register_buffer("num_batches_tracked", at::scalar_tensor(0, at::dtype(at::kLong)));
  } else {
    running_mean = register_buffer("running_mean", at::Tensor());
    running_var = register_buffer("running_var", at::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", at::Tensor());
  }
  reset_parameters();
}

void BatchNorm2dImpl::reset_running_stats() {
  if (options.track_running_stats()) {
    running_mean.zero_();
    running_var.fill_(1);
    num_batches_tracked.zero_();
  }
}

void BatchNorm2dImpl::reset_parameters() {
  reset_running_stats();
  if (options.affine()) {
    torch::nn::init::ones_(weight);
    torch::nn::init::zeros_(bias);
  }
}

void BatchNorm2dImpl::pretty_print(std::ostream& stream) const {
  stream << "kindling::nn::BatchNorm2d(" << options.num_features() << ", eps=" << options.eps() << ", momentum=";
  if (options.momentum()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << (options.affine() ? "true" : "false")
         << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false")
         << ", sync=" << (sync_ ? "true" : "false") << ")";
}

void BatchNorm2dImpl::set_sync(bool enabled, dist::Group group) {
  sync_ = enabled;
  group_ = std::move(group);
}

at::Tensor BatchNorm2dImpl::forward(const at::Tensor& input) {
  KINDLING_CHECK(input.dim() == 4, "kindling::nn::BatchNorm2d: expected a 4D input [N, C, H, W], got ", input.dim(),
                 "D input of size ", input.sizes());
  KINDLING_CHECK(input.size(1) == options.num_features(), "kindling::nn::BatchNorm2d: expected ",
                 options.num_features(), " channels, got input of size ", input.sizes());
  // The factor of the running averages, as torch::nn::BatchNorm2d computes it.
  double factor = options.momentum() ? *options.momentum() : 0.0;
  if (is_training() && options.track_running_stats()) {
    num_batches_tracked += 1;
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();
  }
  const bool use_batch_stats = is_training() || !options.track_running_stats();
  const bool synchronize =
      sync_ && use_batch_stats && dist::is_initialized() && group_.size() > 1 && group_.is_member();
  if (!synchronize) {
    return at::batch_norm(input, weight, bias, running_mean, running_var, use_batch_stats, factor, options.eps(),
                          at::globalContext().userEnabledCuDNN());
  }
  at::Tensor mean, var;
  double count = 0;
  at::Tensor output = SyncBatchNormFunction::apply(input, weight, bias, options.eps(), group_, &mean, &var, &count);
  if (options.track_running_stats() && is_training()) {
    at::NoGradGuard no_grad;
    running_mean.mul_(1 - factor).add_(mean.detach(), factor);
    running_var.mul_(1 - factor).add_(var.detach() * (count / (count - 1)), factor);
  }
  return output;
}

int convert_sync_batchnorm(torch::nn::Module& module, dist::Group group) {
  std::vector<std::string> torch_layers;
  int converted = 0;
  for (const auto& item : module.named_modules()) {
    torch::nn::Module* m = item.value().get();
    if (auto* bn = dynamic_cast<BatchNorm2dImpl*>(m)) {
      bn->set_sync(true, group);
      ++converted;
    } else if (dynamic_cast<torch::nn::BatchNorm1dImpl*>(m) != nullptr ||
               dynamic_cast<torch::nn::BatchNorm2dImpl*>(m) != nullptr ||
               dynamic_cast<torch::nn::BatchNorm3dImpl*>(m) != nullptr) {
      torch_layers.push_back(item.key().empty() ? std::string("(the module itself)") : item.key());
    }
  }
  if (!torch_layers.empty()) {
    std::ostringstream names;
    for (std::size_t i = 0; i < torch_layers.size(); ++i) names << (i ? ", " : "") << torch_layers[i];
    KINDLING_CHECK_T(UsageError, false, "kindling::nn::convert_sync_batchnorm: ", torch_layers.size(),
                     " torch::nn::BatchNorm layer(s) cannot be synchronized: ", names.str(),
                     ". A C++ module calls its children through its own member fields, so they cannot be swapped "
                     "from outside: build the model with kindling::nn::BatchNorm2d (same options, parameters and "
                     "state-dict names), which can be synchronized");
  }
  return converted;
}

}  // namespace nn
}  // namespace kindling
