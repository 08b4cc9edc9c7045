#pragma once
/// \file
/// kindling's DataLoader (batches from a Dataset, loaded by worker threads ahead of the
/// training step). idist's auto_dataloader, which builds one for the current distributed
/// run, is in kindling/dist/auto.h.
///
/// \code
///   auto train = std::make_shared<kindling::data::TransformedDataset>(
///       std::make_shared<kindling::data::CIFAR10>(root), transform);
///   auto loader = kindling::dist::auto_dataloader(
///       train, kindling::data::DataLoaderOptions().batch_size(512).num_workers(4).shuffle(true));
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     loader.set_epoch(epoch);
///     for (const auto& batch : loader) { ... batch.data, batch.target ... }
///   }
/// \endcode
///
/// Order and determinism: the batches of an epoch come in sampler order whatever the
/// number of workers. Random transforms draw from sample_rng(), which is seeded from
/// (seed, epoch, sample index) before each sample, so an epoch's batches are bit-identical
/// for the same seed and epoch with 0, 1 or 8 workers. If set_epoch() is not called before
/// an epoch, the loader uses the previous epoch + 1 (0 for the first), so that shuffles
/// and augmentations change between epochs even when the user forgets it.
///
/// Communication: none. A DataLoader is local to its process (any rank, any time); in a
/// distributed run each rank reads its own shard through its sampler (DistributedSampler).

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/data/dataset.h"
#include "kindling/data/sampler.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace data {

/// Options of DataLoader and auto_dataloader (chain the setters). The setters and getters
/// only store and return values: they do not check or throw; DataLoader's constructor
/// checks the values.
struct KINDLING_API DataLoaderOptions {
  /// Samples per batch, at least 1 (auto_dataloader: the global batch, divided by the world
  /// size when it is at least the world size).
  KINDLING_ARG(int64_t, batch_size) = 1;

  /// Shuffle each epoch. Unset means false for DataLoader and true for auto_dataloader in
  /// a distributed run (idist's rule). Must not be true together with a sampler.
  KINDLING_ARG(std::optional<bool>, shuffle);

  /// Worker threads that load batches ahead (0: load in the calling thread); not negative.
  /// In a distributed run auto_dataloader divides it by the processes per node (rounding
  /// up) when it is at least that.
  KINDLING_ARG(int64_t, num_workers) = 0;

  /// Batches each worker keeps ready ahead of the consumer (default 2; at least 1).
  KINDLING_ARG(int64_t, prefetch_factor) = 2;

  /// Drop the last batch when it would be smaller than batch_size.
  KINDLING_ARG(bool, drop_last) = false;

  /// Put batches in pinned (page-locked) memory for fast copies to a GPU. Unset: true when
  /// kindling::dist::device() is a CUDA device. Ignored with a warning where LibTorch has
  /// no CUDA.
  KINDLING_ARG(std::optional<bool>, pin_memory);

  /// Hand out batches on this device: the consumer's thread copies each batch there as it
  /// becomes current, non-blocking (asynchronous from pinned memory on the current CUDA
  /// stream, so later work on that stream sees the data). Unset: batches stay on the CPU;
  /// auto_dataloader sets kindling::dist::device() when that is a CUDA device.
  KINDLING_ARG(std::optional<c10::Device>, device);

  /// Seed of the shuffle and of sample_rng() (random transforms).
  KINDLING_ARG(uint64_t, seed) = 0;

  /// (auto_dataloader in a distributed run) Pad the ranks' shards to equal length by
  /// repeating samples, as torch's DistributedSampler (default true). false: every sample
  /// is seen exactly once and shards may differ by one sample or be empty, so metrics equal
  /// the single-process value: use it for evaluation loaders, never for DDP training.
  KINDLING_ARG(bool, pad_shards) = true;

  /// A sampler that decides the order (instead of shuffle).
  KINDLING_ARG(std::shared_ptr<Sampler>, sampler);

 public:
  /// "batch_size=64, shuffle=unset, num_workers=2, ..." (for logs). Does not throw.
  std::string to_string() const;
};

namespace detail {
struct EpochRun;
}

/// Batches of a Dataset: data stacked along a new first dimension, targets too.
/// Getters are local and do not throw.
class KINDLING_API DataLoader {
 public:
  /// Throws kindling::UsageError when `dataset` is null, batch_size < 1, num_workers < 0,
  /// prefetch_factor < 1, or shuffle is true together with a sampler. Does not communicate
  /// (it reads kindling::dist::device() to resolve pin_memory).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;

  /// An input iterator over one epoch's batches. Loading errors surface where a batch
  /// becomes current: in begin() and operator++.
  class KINDLING_API Iterator {
   public:
    using value_type = Example;
    using reference = const Example&;
    using difference_type = std::ptrdiff_t;
    using iterator_category = std::input_iterator_tag;
    Iterator() = default;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run);
    /// The current batch. Throws kindling::UsageError on the end iterator.
    const Example& operator*() const;
    const Example* operator->() const { return &**this; }
    /// Moves to the next batch (waiting for the workers when there are any). Throws
    /// kindling::UsageError on the end iterator or, with workers, when the epoch was stopped
    /// by a later begin(); kindling::Error when a sample failed to load (see begin()).
    Iterator& operator++();
    bool operator==(const Iterator& other) const;
    bool operator!=(const Iterator& other) const { return !(*this == other); }

   private:
    std::shared_ptr<detail::EpochRun> run_;  // null: end
  };

  /// Starts an epoch (see the file comment for which) and loads its first batch; an empty
  /// epoch returns end(). Starting another epoch stops the previous one's workers; its
  /// iterators must not be used any more. Throws kindling::Error when a sample's get() (or
  /// its transform) throws a std::exception, naming the sample, batch and epoch; other
  /// errors (the sampler's, collate()'s, pinning, the copy to the device) propagate as they are.
  Iterator begin() { return begin_at(0); }
  /// begin(), positioned at batch `first` of the epoch (0-based): the batches before it are
  /// neither loaded nor transformed, and the ones after it are the same as begin()'s (what
  /// an exact resume needs). Returns end() when `first` >= size(). Throws as begin(), and
  /// kindling::UsageError for a negative `first`.
  Iterator begin_at(int64_t first);
  Iterator end() { return Iterator(); }

  /// The epoch the next begin() runs. Throws kindling::UsageError for a negative epoch.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return next_epoch_; }
  /// Batches per epoch (from the sampler's size, batch_size and drop_last).
  int64_t size() const;
  const DataLoaderOptions& options() const { return options_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }
  /// Whether batches are pinned (options().pin_memory() resolved).
  bool pins_memory() const { return pin_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  bool pin_ = false;
  int64_t next_epoch_ = 0;
  std::weak_ptr<detail::EpochRun> active_;
};

/// Stacks samples into a batch (data and targets stacked along a new dimension 0).
/// Throws kindling::UsageError for an empty vector; samples of different shapes fail in
/// at::stack (LibTorch's c10::Error). Local; does not communicate.
KINDLING_API Example collate(const std::vector<Example>& samples);

}  // namespace data

}  // namespace kindling
