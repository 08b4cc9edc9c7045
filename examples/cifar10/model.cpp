// The tutorial's model under DDP or sharded (model.h).
#include "model.h"

#include <kindling/dist/auto.h>
#include <kindling/error.h>
#include <kindling/nn/powersgd.h>
#include <torch/optim/sgd.h>

namespace cifar10 {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;

namespace {

// --comm_hook's hook (null for none).
std::shared_ptr<kindling::nn::CommHook> get_comm_hook(const Config& config) {
  if (config.comm_hook == "fp16") return kindling::nn::fp16_compress_hook();
  if (config.comm_hook == "bf16") return kindling::nn::bf16_compress_hook();
  if (config.comm_hook == "powersgd") {
    return kindling::nn::powerSGD_hook(kindling::nn::PowerSgdOptions()
                                           .matrix_approximation_rank(config.powersgd_rank)
                                           .start_powerSGD_iter(config.powersgd_start_iter));
  }
  return nullptr;
}

kindling::models::ResNet get_resnet(const Config& config, int64_t channels) {
  const auto options = kindling::models::ResNetOptions().num_classes(10).in_channels(channels);
  if (config.model == "resnet34") return kindling::models::resnet34(options);
  if (config.model == "resnet50") return kindling::models::resnet50(options);
  return kindling::models::resnet18(options);
}

}  // namespace

std::vector<at::Tensor> TrainedModel::make(const Config& config, int64_t channels) {
  auto net = get_resnet(config, channels);
  if (config.sharding != "none") {
    const bool zero3 = config.sharding == "zero3";
    sharded_.emplace(kd::auto_model(net, kindling::nn::ShardingOptions().reshard_after_forward(zero3)));
    return sharded_->parameters();
  }
  if (config.diloco_every > 0) {
    net->to(kd::device());  // where DiLoCo keeps its copies of the weights
    net_ = net;
    return net->parameters();
  }
  hook_ = get_comm_hook(config);
  ddp_.emplace(kd::auto_model(net, kindling::nn::DdpOptions().comm_hook(hook_)));
  return (*ddp_)->parameters();
}

torch::optim::Optimizer& TrainedModel::stepped_by(torch::optim::Optimizer& inner, const Config& config) {
  const bool tuned = config.diloco_fragments != 1 || config.diloco_delay != 0 || config.diloco_exchange != "float32" ||
                     config.diloco_warmup != 0 || config.diloco_per_host || config.diloco_outer_lr != 1.0 ||
                     config.diloco_outer_momentum != 0.0;
  KINDLING_CHECK(config.diloco_every > 0 || !tuned, "cifar10: --diloco_ settings were given with --diloco_every 0 "
                 "(DDP's average at every step), where they do nothing; give --diloco_every H, or drop them");
  if (config.diloco_every == 0) return inner;
  auto options = kindling::nn::DiLoCoOptions()
                     .sync_every(config.diloco_every)
                     .fragments(config.diloco_fragments)
                     .fragment_sync_delay(config.diloco_delay)
                     .warmup_steps(config.diloco_warmup)
                     .per_host(config.diloco_per_host);
  const double momentum = config.diloco_outer_momentum;
  options.outer(torch::optim::SGDOptions(config.diloco_outer_lr).momentum(momentum).nesterov(momentum > 0));
  if (config.diloco_exchange != "float32") options.exchange_dtype(config.diloco_exchange == "bf16" ? at::kBFloat16 : at::kHalf);
  diloco_ = std::make_unique<kindling::nn::DiLoCo>(*net_, inner, options);
  // DiLoCo averages the BatchNorm statistics with its exchanges: none at every forward.
  ddp_.emplace(kd::auto_model(net_, kindling::nn::DdpOptions().comm_hook(diloco_->comm_hook()).broadcast_buffers(false)));
  net_ = nullptr;
  return *diloco_;
}

std::shared_ptr<kh::Stateful> TrainedModel::state() const {
  return sharded_ ? kh::stateful(*sharded_) : kh::stateful(*ddp_);
}

std::shared_ptr<kh::Stateful> TrainedModel::optimizer_state(torch::optim::Optimizer& optimizer) const {
  return sharded_ ? kh::stateful(optimizer, *sharded_) : kh::stateful(optimizer);
}

}  // namespace cifar10
