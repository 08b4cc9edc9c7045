#pragma once
/// \file
/// DistributedSampler: the indices of a dataset that one rank visits in one epoch, in the
/// same order as Python's torch.utils.data.DistributedSampler (torch 1.13) for the same
/// dataset size, number of replicas, rank, shuffle, seed, epoch and drop_last.

#include <cstdint>
#include <optional>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace data {

class KINDLING_API DistributedSampler {
 public:
  /// `num_replicas` / `rank` default to kindling::dist's world size and rank.
  explicit DistributedSampler(int64_t dataset_size, std::optional<int> num_replicas = std::nullopt,
                              std::optional<int> rank = std::nullopt, bool shuffle = true, uint64_t seed = 0,
                              bool drop_last = false);

  /// Makes the next indices() use this epoch's shuffle (call it before each epoch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  /// This rank's indices for the current epoch (num_samples() of them).
  std::vector<int64_t> indices() const;
  /// Samples per rank: ceil(size / replicas), or floor with drop_last.
  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  int64_t size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace data
}  // namespace kindling
