// idist's auto helpers (include/kindling/dist/auto.h): auto_model's preparation and
// auto_dataloader's rules.
#include "kindling/dist/auto.h"

#include <string>

#include "kindling/data/sampler.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "kindling/nn/batchnorm.h"

namespace kindling {
namespace dist {
namespace detail {

std::shared_ptr<nn::GradientReducer> prepare_model(torch::nn::Module& module, const nn::DdpOptions& options) {
  module.to(device());
  if (!is_initialized()) return nullptr;
  const auto& group = options.group();
  if (group.size() <= 1 || group.rank() < 0) return nullptr;
  if (options.sync_batchnorm()) nn::convert_sync_batchnorm(module, group);
  return std::make_shared<nn::GradientReducer>(module, options);
}

std::shared_ptr<nn::ShardedModel> prepare_sharded(torch::nn::Module& module, const nn::ShardingOptions& options,
                                                  bool children_are_units) {
  module.to(device());
  if (!is_initialized()) return nullptr;
  const auto& group = options.group();
  // Sharded on one rank too (a world live recovery or elastic shrank to one): the same model,
  // its checkpoints and committed parts in every world; the serial model alone is a pass-through.
  if (group.rank() < 0) return nullptr;
  return std::make_shared<nn::ShardedModel>(module, options, children_are_units);
}

}  // namespace detail

data::DataLoader auto_dataloader(std::shared_ptr<const data::Dataset> dataset, data::DataLoaderOptions options) {
  KINDLING_CHECK(dataset != nullptr, "kindling::dist::auto_dataloader: the dataset is null");
  const int rank = get_rank();
  const int ws = get_world_size();
  // A warning that holds on every rank is printed once (rank 0); one about this rank's own
  // state (its sampler) is printed where it holds, which may be any rank.
  auto warn = [&](const std::string& text, bool this_rank_only = false) {
    if (rank == 0 || this_rank_only) log(LogLevel::kWarning, "kindling::dist::auto_dataloader: warning: " + text);
  };
  if (ws > 1) {
    const int64_t bs = options.batch_size();
    if (bs >= ws) {
      if (bs % ws != 0) {
        warn("batch_size " + std::to_string(bs) + " is not a multiple of the world size " + std::to_string(ws) +
             "; each rank gets " + std::to_string(bs / ws) + " so the global batch is " + std::to_string(bs / ws * ws));
      }
      options.batch_size(bs / ws);
    }
    const int64_t nproc = get_nproc_per_node();
    const int64_t nw = options.num_workers();
    if (nproc > 0 && nw >= nproc) options.num_workers((nw + nproc - 1) / nproc);

    const auto& sampler = options.sampler();
    if (!sampler) {
      const bool shuffle = options.shuffle().value_or(true);
      options.sampler(std::make_shared<data::DistributedSampler>(
          dataset->size(),
          data::DistributedSamplerOptions().num_replicas(ws).rank(rank).shuffle(shuffle).seed(options.seed()).pad(options.pad_shards())));
      options.shuffle(false);
    } else if (auto* d = dynamic_cast<data::DistributedSampler*>(sampler.get())) {
      if (d->rank() != rank) {
        warn("found a DistributedSampler with rank=" + std::to_string(d->rank()) + ", but the process rank is " +
                 std::to_string(rank),
             true);
      }
      if (d->num_replicas() != ws) {
        warn("found a DistributedSampler with num_replicas=" + std::to_string(d->num_replicas()) +
                 ", but the world size is " + std::to_string(ws),
             true);
      }
    } else if (dynamic_cast<data::DistributedProxySampler*>(sampler.get()) == nullptr) {
      KINDLING_CHECK(!options.shuffle().value_or(false),
                     "kindling::dist::auto_dataloader: shuffle=true and a sampler were both given; they are mutually "
                     "exclusive (the sampler decides the order): drop shuffle or the sampler");
      options.sampler(std::make_shared<data::DistributedProxySampler>(sampler, ws, rank));
    }
  }
  if (!options.pin_memory()) options.pin_memory(device().is_cuda());
  if (!options.device() && device().is_cuda()) options.device(device());
  if (rank == 0) {
    log(LogLevel::kInfo, "kindling::dist::auto_dataloader: " + dataset->name() + ": " + options.to_string());
  }
  return data::DataLoader(std::move(dataset), std::move(options));
}

}  // namespace dist

}  // namespace kindling
