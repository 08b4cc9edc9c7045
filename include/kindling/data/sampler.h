#pragma once
/// \file
/// DistributedSampler: the indices of a dataset that one rank visits in one epoch, in the
/// same order as Python's torch.utils.data.DistributedSampler (torch 1.13) for the same
/// dataset size, number of replicas, rank, shuffle, seed, epoch and drop_last; and the
/// plain samplers a DataLoader uses without one.
///
/// Every sampler here is local: any rank may construct and use it, and nothing here
/// communicates (the distributed samplers only read the rank and world size, or take them
/// as arguments). Getters and set_epoch() do not throw.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kindling/export.h"
#include "kindling/options.h"

namespace kindling {
namespace data {

/// The order in which a DataLoader visits a dataset's samples in one epoch.
/// Implementations are deterministic for a given epoch, so every rank of a job that uses
/// the same sampler settings sees the same sequence.
class KINDLING_API Sampler {
 public:
  virtual ~Sampler() = default;
  /// The indices of the current epoch, in visiting order.
  virtual std::vector<int64_t> indices() const = 0;
  /// How many indices indices() returns.
  virtual int64_t size() const = 0;
  /// Selects the epoch whose order indices() returns (a new shuffle per epoch).
  virtual void set_epoch(int64_t epoch) = 0;
};

/// 0, 1, ..., n-1.
class KINDLING_API SequentialSampler : public Sampler {
 public:
  /// Throws kindling::UsageError for a negative size.
  explicit SequentialSampler(int64_t size);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return size_; }
  void set_epoch(int64_t) override {}

 private:
  int64_t size_;
};

/// A permutation of 0..n-1 drawn from a generator seeded with seed + epoch (the same
/// permutation torch.randperm gives for that seed in Python).
class KINDLING_API RandomSampler : public Sampler {
 public:
  /// Throws kindling::UsageError for a negative size.
  explicit RandomSampler(int64_t size, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return size_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

 private:
  int64_t size_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

/// A permutation of the given indices, drawn like RandomSampler (seed + epoch): Python's
/// SubsetRandomSampler with a seeded generator.
class KINDLING_API SubsetRandomSampler : public Sampler {
 public:
  /// Takes the indices as they are (not checked); does not throw.
  explicit SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed = 0);
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

 private:
  std::vector<int64_t> indices_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

/// Options of DistributedSampler (chain the setters). Unset num_replicas / rank mean
/// kindling::dist's world size and rank at construction.
struct KINDLING_API DistributedSamplerOptions {
  /// The number of shards (default: the world size).
  KINDLING_ARG(std::optional<int>, num_replicas);

  /// This shard's index, in [0, num_replicas) (default: this rank).
  KINDLING_ARG(std::optional<int>, rank);

  /// Shuffle with a generator seeded from seed + epoch (default true).
  KINDLING_ARG(bool, shuffle) = true;

  /// Seed of the shuffle, the same on every rank (default 0).
  KINDLING_ARG(uint64_t, seed) = 0;

  /// Drop the tail so that every rank gets the same number of distinct samples (default
  /// false: pad by repeating from the start).
  KINDLING_ARG(bool, drop_last) = false;

  /// Pad the shards to equal length by repeating samples (default true, as torch). false:
  /// every sample is visited exactly once and rank r gets positions r, r + replicas, ...
  /// of the epoch's order, so shards differ in length by at most one and may be empty.
  /// For evaluation, where metrics must equal the single-process value; never for DDP
  /// training (ranks would run different numbers of steps). Ignored with drop_last.
  KINDLING_ARG(bool, pad) = true;
};

/// Python's torch.utils.data.DistributedSampler, index for index (with pad(false): the
/// unpadded shards described at DistributedSamplerOptions::pad).
class KINDLING_API DistributedSampler : public Sampler {
 public:
  /// `num_replicas` / `rank` default to kindling::dist's world size and rank. Throws
  /// kindling::UsageError for a negative dataset_size, num_replicas < 1, or a rank outside
  /// [0, num_replicas). Any rank; local, no communication.
  explicit DistributedSampler(int64_t dataset_size,
                              const DistributedSamplerOptions& options = DistributedSamplerOptions());

  /// Makes the next indices() use this epoch's shuffle (call it before each epoch).
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  /// This rank's indices for the current epoch (num_samples() of them).
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return num_samples_; }
  /// This rank's samples: ceil(size / replicas), floor with drop_last, and without padding
  /// the positions of this rank below size.
  int64_t num_samples() const { return num_samples_; }
  /// Indices over all ranks in one epoch (the dataset size when not padded).
  int64_t total_size() const;
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }
  bool shuffle() const { return shuffle_; }
  bool pad() const { return pad_; }

 private:
  int64_t size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  bool pad_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

/// idist's DistributedProxySampler: shards the order of any other sampler over the ranks.
/// Each epoch the wrapped sampler's indices (for that epoch) are repeated until there are
/// total_size() of them, then rank r takes positions r, r + replicas, ... so the shards are
/// disjoint in position and equal in length.
class KINDLING_API DistributedProxySampler : public Sampler {
 public:
  /// `sampler` must not be a distributed sampler already. `num_replicas` / `rank` default
  /// to kindling::dist's world size and rank. Throws kindling::UsageError for a null or
  /// distributed `sampler`, num_replicas < 1, or a rank outside [0, num_replicas).
  /// Any rank; local, no communication.
  explicit DistributedProxySampler(std::shared_ptr<Sampler> sampler, std::optional<int> num_replicas = std::nullopt,
                                   std::optional<int> rank = std::nullopt);
  /// This rank's indices for the current epoch. Sets the wrapped sampler's epoch first.
  /// Throws kindling::UsageError when the wrapped sampler returns a number of indices other
  /// than its size(). An empty wrapped sampler gives no indices.
  std::vector<int64_t> indices() const override;
  int64_t size() const override { return num_samples_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }

 private:
  std::shared_ptr<Sampler> sampler_;
  int num_replicas_;
  int rank_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace data
}  // namespace kindling
