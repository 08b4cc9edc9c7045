#pragma once
/// \file
/// The dataset interface of kindling's data loading: a map-style dataset (size + get(i)),
/// the per-sample random generator that random transforms draw from, and a dataset with a
/// transform applied.
///
/// Determinism: the DataLoader seeds sample_rng() from (loader seed, epoch, sample index)
/// before it calls get(i), so random transforms give the same result for the same sample
/// whatever worker thread runs them and however many workers there are.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace data {

/// One sample (or, once collated, one batch): the input and its target.
struct Example {
  at::Tensor data;
  at::Tensor target;
};

/// A map-style dataset. get() must be safe to call from several threads at once (the
/// loader's workers): read-only access to data loaded in the constructor is.
/// Datasets are local to the process: nothing here communicates.
class KINDLING_API Dataset {
 public:
  virtual ~Dataset() = default;
  /// The number of samples; get() accepts indices in [0, size()).
  virtual int64_t size() const = 0;
  /// Sample `index`. kindling's datasets throw kindling::UsageError for an index outside
  /// [0, size()). Inside a DataLoader, a std::exception from get() is rethrown to the
  /// consumer as a kindling::Error naming the sample, batch and epoch.
  virtual Example get(int64_t index) const = 0;
  /// A short description for logs ("FashionMNIST(train, 60000)").
  virtual std::string name() const { return "Dataset"; }
};

/// The generator that random transforms use. Each thread has its own; the DataLoader
/// seeds it before each sample (see the file comment). Outside a loader it is seeded with
/// a fixed value per thread, so results are reproducible too. Does not throw.
KINDLING_API std::mt19937_64& sample_rng();
/// Seeds this thread's sample_rng() from (seed, epoch, index) the way the loader does.
/// Affects the calling thread only; does not throw.
KINDLING_API void seed_sample_rng(uint64_t seed, int64_t epoch, int64_t index);

/// A transform of one sample's input tensor.
using Transform = std::function<at::Tensor(const at::Tensor&)>;

/// `dataset` with `transform` applied to each sample's data (targets unchanged).
/// The constructor checks nothing (neither argument may be null or empty) and does not throw;
/// get() throws what the wrapped dataset's get() or the transform throws (for kindling's
/// datasets and transforms, kindling::UsageError).
class KINDLING_API TransformedDataset : public Dataset {
 public:
  TransformedDataset(std::shared_ptr<const Dataset> dataset, Transform transform)
      : dataset_(std::move(dataset)), transform_(std::move(transform)) {}
  int64_t size() const override { return dataset_->size(); }
  Example get(int64_t index) const override {
    Example e = dataset_->get(index);
    e.data = transform_(e.data);
    return e;
  }
  std::string name() const override { return dataset_->name(); }

 private:
  std::shared_ptr<const Dataset> dataset_;
  Transform transform_;
};

/// The samples of `dataset` at `indices` (in that order): sample i is dataset[indices[i]].
class KINDLING_API Subset : public Dataset {
 public:
  /// Throws kindling::UsageError when `dataset` is null or an index is outside
  /// [0, dataset->size()) (the message names the index and its position).
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  /// The first `count` samples (all of them when count is negative or larger).
  /// Throws kindling::UsageError when `dataset` is null.
  static std::shared_ptr<Subset> first(std::shared_ptr<const Dataset> dataset, int64_t count);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  /// Throws kindling::UsageError for an index outside [0, size()); otherwise what the
  /// wrapped dataset's get() throws.
  Example get(int64_t index) const override;
  /// The wrapped dataset's name with "[count of total]" appended.
  std::string name() const override;

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

}  // namespace data
}  // namespace kindling
