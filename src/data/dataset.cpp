// sample_rng() and Subset (see include/kindling/data/dataset.h).
#include "kindling/data/dataset.h"

#include <algorithm>

#include "kindling/error.h"

namespace kindling {
namespace data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::mt19937_64& sample_rng() {
  thread_local std::mt19937_64 rng(splitmix64(0));
  return rng;
}

void seed_sample_rng(uint64_t seed, int64_t epoch, int64_t index) {
  const uint64_t mixed =
      splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
  sample_rng().seed(mixed);
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  KINDLING_CHECK(dataset_ != nullptr, "kindling::data::Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (std::size_t i = 0; i < indices_.size(); ++i) {
    KINDLING_CHECK(indices_[i] >= 0 && indices_[i] < n, "kindling::data::Subset: index ", indices_[i], " (position ", i,
                   ") is out of range for ", dataset_->name(), " of size ", n);
  }
}

std::shared_ptr<Subset> Subset::first(std::shared_ptr<const Dataset> dataset, int64_t count) {
  KINDLING_CHECK(dataset != nullptr, "kindling::data::Subset::first: the dataset is null");
  const int64_t n = count < 0 ? dataset->size() : std::min(count, dataset->size());
  std::vector<int64_t> indices(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = i;
  return std::make_shared<Subset>(std::move(dataset), std::move(indices));
}

Example Subset::get(int64_t index) const {
  KINDLING_CHECK_T(UsageError, index >= 0 && index < size(), "kindling::data::Subset: index ", index,
                   " is out of range for a subset of size ", size());
  return dataset_->get(indices_[static_cast<std::size_t>(index)]);
}

std::string Subset::name() const {
  return dataset_->name() + "[" + std::to_string(indices_.size()) + " of " + std::to_string(dataset_->size()) + "]";
}

}  // namespace data
}  // namespace kindling
