// DistributedSampler with Python's index order (see include/kindling/data/sampler.h).
#include "kindling/data/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "kindling/dist/dist.h"
#include "kindling/error.h"

namespace kindling {
namespace data {

DistributedSampler::DistributedSampler(int64_t dataset_size, const DistributedSamplerOptions& options)
    : size_(dataset_size),
      num_replicas_(options.num_replicas().value_or(dist::get_world_size())),
      rank_(options.rank().value_or(dist::get_rank())),
      shuffle_(options.shuffle()),
      seed_(options.seed()),
      drop_last_(options.drop_last()),
      pad_(options.pad() || options.drop_last()) {
  KINDLING_CHECK(size_ >= 0, "kindling::data::DistributedSampler: dataset size must not be negative, got ", size_);
  KINDLING_CHECK(num_replicas_ >= 1, "kindling::data::DistributedSampler: num_replicas must be at least 1, got ",
                 num_replicas_);
  KINDLING_CHECK(rank_ >= 0 && rank_ < num_replicas_, "kindling::data::DistributedSampler: invalid rank ", rank_,
                 ", rank should be in the interval [0, ", num_replicas_ - 1, "]");
  if (drop_last_ && size_ % num_replicas_ != 0) {
    num_samples_ = (size_ - num_replicas_ + num_replicas_ - 1) / num_replicas_;  // ceil((n - r) / r)
    if (size_ < num_replicas_) num_samples_ = 0;
  } else if (!pad_) {
    num_samples_ = size_ > rank_ ? (size_ - rank_ + num_replicas_ - 1) / num_replicas_ : 0;
  } else {
    num_samples_ = (size_ + num_replicas_ - 1) / num_replicas_;
  }
}

int64_t DistributedSampler::total_size() const {
  if (!pad_) return size_;
  return num_samples_ * num_replicas_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (shuffle_) {
    // The same generator and algorithm as torch.randperm(n, generator=g) with
    // g.manual_seed(seed + epoch) in Python.
    auto gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
    at::Tensor perm = at::randperm(size_, gen, at::TensorOptions().dtype(at::kLong));
    all.assign(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + size_);
  } else {
    all.resize(static_cast<std::size_t>(size_));
    for (int64_t i = 0; i < size_; ++i) all[static_cast<std::size_t>(i)] = i;
  }
  const auto total = static_cast<std::size_t>(total_size());
  if (!pad_) {
    // No padding: every index once; this rank's positions below the size.
  } else if (!drop_last_) {
    // Pad by repeating from the start (as often as needed) to a multiple of the replicas.
    const std::size_t n = all.size();
    for (std::size_t k = 0; all.size() < total && n > 0; ++k) all.push_back(all[k % n]);
  } else {
    all.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total; i += static_cast<std::size_t>(num_replicas_)) {
    mine.push_back(all[i]);
  }
  return mine;
}

SequentialSampler::SequentialSampler(int64_t size) : size_(size) {
  KINDLING_CHECK(size_ >= 0, "kindling::data::SequentialSampler: size must not be negative, got ", size_);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<std::size_t>(size_));
  for (int64_t i = 0; i < size_; ++i) out[static_cast<std::size_t>(i)] = i;
  return out;
}

RandomSampler::RandomSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {
  KINDLING_CHECK(size_ >= 0, "kindling::data::RandomSampler: size must not be negative, got ", size_);
}

std::vector<int64_t> RandomSampler::indices() const {
  auto gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
  at::Tensor perm = at::randperm(size_, gen, at::TensorOptions().dtype(at::kLong));
  return std::vector<int64_t>(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + size_);
}

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, uint64_t seed)
    : indices_(std::move(indices)), seed_(seed) {}

std::vector<int64_t> SubsetRandomSampler::indices() const {
  auto gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
  const auto n = static_cast<int64_t>(indices_.size());
  at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
  std::vector<int64_t> out(indices_.size());
  const int64_t* p = perm.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = indices_[static_cast<std::size_t>(p[i])];
  return out;
}

DistributedProxySampler::DistributedProxySampler(std::shared_ptr<Sampler> sampler, std::optional<int> num_replicas,
                                                 std::optional<int> rank)
    : sampler_(std::move(sampler)),
      num_replicas_(num_replicas.value_or(dist::get_world_size())),
      rank_(rank.value_or(dist::get_rank())) {
  KINDLING_CHECK(sampler_ != nullptr, "kindling::data::DistributedProxySampler: the sampler to wrap is null");
  KINDLING_CHECK(dynamic_cast<DistributedSampler*>(sampler_.get()) == nullptr &&
                     dynamic_cast<DistributedProxySampler*>(sampler_.get()) == nullptr,
                 "kindling::data::DistributedProxySampler: the sampler to wrap must not be a distributed sampler "
                 "already; pass the plain sampler (or use the DistributedSampler as it is)");
  KINDLING_CHECK(num_replicas_ >= 1, "kindling::data::DistributedProxySampler: num_replicas must be at least 1, got ",
                 num_replicas_);
  KINDLING_CHECK(rank_ >= 0 && rank_ < num_replicas_, "kindling::data::DistributedProxySampler: invalid rank ", rank_,
                 ", rank should be in the interval [0, ", num_replicas_ - 1, "]");
  num_samples_ = (sampler_->size() + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedProxySampler::indices() const {
  sampler_->set_epoch(epoch_);
  const std::vector<int64_t> pass = sampler_->indices();
  KINDLING_CHECK(static_cast<int64_t>(pass.size()) == sampler_->size(),
                 "kindling::data::DistributedProxySampler: the wrapped sampler returned ", pass.size(),
                 " indices but its size() is ", sampler_->size(), "; make size() match indices()");
  const auto total = static_cast<std::size_t>(total_size());
  std::vector<int64_t> mine;
  if (pass.empty()) return mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total; i += static_cast<std::size_t>(num_replicas_)) {
    mine.push_back(pass[i % pass.size()]);
  }
  return mine;
}

}  // namespace data
}  // namespace kindling
