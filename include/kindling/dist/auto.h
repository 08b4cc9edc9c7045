#pragma once
/// \file
/// idist's auto helpers (ignite.distributed.auto): adapt a model, an optimizer and a data
/// loader to the current distributed configuration, so that the same training code runs in
/// one process or in many.
///
/// \code
///   auto model = kindling::dist::auto_model(Net());          // on device(), DDP when distributed
///   torch::optim::SGD opt(model->parameters(), 0.1);
///   kindling::dist::auto_optim(opt);                          // unchanged (see below)
///   auto loader = kindling::dist::auto_dataloader(dataset, kindling::data::DataLoaderOptions().batch_size(256));
/// \endcode
#include <memory>
#include <type_traits>

#include "kindling/data/loader.h"
#include "kindling/export.h"
#include "kindling/nn/ddp.h"
#include "kindling/nn/sharding.h"

namespace kindling {
namespace dist {

namespace detail {
/// Moves `module` to device() and, in a distributed model with more than one rank in the
/// group, returns its reducer (else null).
KINDLING_API std::shared_ptr<nn::GradientReducer> prepare_model(torch::nn::Module& module,
                                                                const nn::DdpOptions& options);
/// Moves `module` to device() and, in a distributed model with more than one rank in the
/// group, returns its sharding engine (else null).
KINDLING_API std::shared_ptr<nn::ShardedModel> prepare_sharded(torch::nn::Module& module,
                                                               const nn::ShardingOptions& options,
                                                               bool children_are_units);
}  // namespace detail

/// idist.auto_model: places the module on device() and, when distributed, wraps it in
/// kindling's DistributedDataParallel (parameters and buffers broadcast from the group's first rank).
/// Every rank of the group calls it, in the same order (the broadcast is collective).
/// Throws kindling::UsageError for invalid DdpOptions, TimeoutError / CommunicationError
/// when the broadcast fails.
template <class M>
nn::DistributedDataParallel<M> auto_model(std::shared_ptr<M> module, const nn::DdpOptions& options = nn::DdpOptions()) {
  auto reducer = detail::prepare_model(*module, options);
  return nn::DistributedDataParallel<M>(std::move(module), std::move(reducer));
}
/// The same for a module holder (the usual `Net model;` of TORCH_MODULE).
template <class M>
nn::DistributedDataParallel<M> auto_model(const torch::nn::ModuleHolder<M>& holder,
                                          const nn::DdpOptions& options = nn::DdpOptions()) {
  return auto_model(holder.ptr(), options);
}

/// auto_model with sharding (kindling/nn/sharding.h): places the module on device() and, when
/// distributed (a world of one rank too), splits its parameters, gradients and optimizer state across the group's ranks
/// (ZeRO-3, or ZeRO-2 without reshard_after_forward). Build the optimizer on the result's
/// parameters(). A torch::nn::Sequential without Units is sharded child by child. Every rank of
/// the group calls it, in the same order (collective). Throws what ShardedModel's constructor
/// throws.
template <class M>
nn::FullyShardedDataParallel<M> auto_model(std::shared_ptr<M> module, const nn::ShardingOptions& options) {
  constexpr bool sequential = std::is_base_of<torch::nn::SequentialImpl, M>::value;
  auto sharded = detail::prepare_sharded(*module, options, sequential);
  return nn::FullyShardedDataParallel<M>(std::move(module), std::move(sharded));
}
/// The same for a module holder.
template <class M>
nn::FullyShardedDataParallel<M> auto_model(const torch::nn::ModuleHolder<M>& holder,
                                           const nn::ShardingOptions& options) {
  return auto_model(holder.ptr(), options);
}

/// idist.auto_optim: with the serial, gloo, mpi and nccl backends the optimizer needs no
/// change (gradients are already averaged by DistributedDataParallel), so it is returned
/// as is; the function exists so that code written for idist reads the same.
template <class Optimizer>
Optimizer& auto_optim(Optimizer& optimizer) {
  return optimizer;
}

/// idist.auto_dataloader. In a distributed run (world size > 1):
/// - batch_size >= world size becomes batch_size / world size (floor; a warning on rank 0
///   when it does not divide); a smaller one is kept;
/// - num_workers >= processes per node becomes ceil(num_workers / processes per node);
/// - no sampler: a DistributedSampler(shuffle = options.shuffle() or true, seed,
///   pad = options.pad_shards(): false for an exact evaluation, see DataLoaderOptions);
///   a DistributedSampler: kept, with a warning if its rank or replicas disagree with the
///   run; any other sampler: wrapped in a DistributedProxySampler.
/// In every run pin_memory defaults to "device() is CUDA", and so does the batches'
/// device (DataLoaderOptions::device). Rank 0 prints the options used.
KINDLING_API data::DataLoader auto_dataloader(std::shared_ptr<const data::Dataset> dataset,
                                              data::DataLoaderOptions options = data::DataLoaderOptions());

}  // namespace dist
}  // namespace kindling
