// DistributedDataParallel's gradient buckets and one backward's progress through them
// (src/nn/ddp/ddp_bucket_set.h).
#include "nn/ddp/ddp_bucket_set.h"

#include <c10/util/strides.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "kindling/error.h"
#include "nn/ddp/ddp_buckets.h"

namespace kindling {
namespace nn {
namespace detail {

void BucketSet::Bucket::wait() {
  if (hooked) {
    hooked->wait();
    hooked.reset();
  } else {
    work.wait();
  }
}

BucketSet::~BucketSet() {
  if (grad_views_.empty()) return;
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (grad_in_bucket(i)) params_[i].mutable_grad() = grad_views_[i].clone();
  }
}

void BucketSet::make(const std::vector<std::size_t>& order, double cap_mb, bool as_view, const dist::Group& group) {
  buckets_.clear();
  grad_views_.clear();
  bucket_of_.assign(params_.size(), 0);
  offset_of_.assign(params_.size(), 0);
  if (ready_.size() != params_.size()) ready_.assign(params_.size(), 0);
  next_launch_ = 0;
  const auto groups = assign_buckets(params_, cap_mb, order);
  for (std::size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    bucket.members = groups[b];
    int64_t numel = 0;
    for (std::size_t i : bucket.members) {
      bucket_of_[i] = b;
      offset_of_[i] = numel;
      numel += params_[i].numel();
    }
    const auto& first = params_[bucket.members.front()];
    // In the backend's fastest memory for all-reduce (the mpi backend's shared window).
    bucket.flat = dist::empty_comm_buffer({numel}, first.options().requires_grad(false), group).zero_();
    bucket.pending = bucket.members.size();
    buckets_.push_back(std::move(bucket));
  }
  if (!as_view) return;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& flat = buckets_[bucket_of_[i]].flat;
    const at::Tensor& p = params_[i];
    grad_views_.push_back(at::empty({0}, flat.options()).set_(flat.storage(), flat.storage_offset() + offset_of_[i],
                                                                p.sizes(), c10::contiguous_strides(p.sizes())));
  }
}

void BucketSet::remake(const std::vector<std::size_t>& order, double cap_mb, bool as_view, const dist::Group& group) {
  // Gradients that live in the old buckets move to their places in the new ones.
  std::vector<at::Tensor> moved(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (grad_in_bucket(i)) moved[i] = params_[i].grad();
  }
  make(order, cap_mb, as_view, group);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!moved[i].defined()) continue;
    grad_views_[i].copy_(moved[i]);
    params_[i].mutable_grad() = grad_views_[i];
  }
}

bool BucketSet::same_as(const std::vector<std::vector<std::size_t>>& groups) const {
  bool same = groups.size() == buckets_.size();
  for (std::size_t b = 0; b < groups.size() && same; ++b) same = groups[b] == buckets_[b].members;
  return same;
}

std::vector<std::size_t> BucketSet::order() const {
  std::vector<std::size_t> order;
  for (const auto& b : buckets_) order.insert(order.end(), b.members.begin(), b.members.end());
  return order;
}

void BucketSet::copy_in(std::size_t i, const at::Tensor& scale, bool hooked) {
  at::Tensor& grad = params_[i].mutable_grad();
  if (grad_in_bucket(i)) {
    // Backward accumulated straight into the bucket: nothing to copy.
    if (!hooked) grad.mul_(scale);
    return;
  }
  at::Tensor into = slot(i);
  if (hooked) {
    into.copy_(grad.reshape({-1}));  // a hook gets the sum's terms and averages itself
  } else {
    // Scaled while copied (as c10d::Reducer does): one pass over the gradients, not two.
    at::mul_out(into, grad.reshape({-1}), scale);
  }
  if (!grad_views_.empty()) grad = grad_views_[i];  // from now on backward accumulates there
}

bool BucketSet::count(std::size_t i) {
  auto& b = buckets_[bucket_of_[i]];
  KINDLING_INTERNAL_ASSERT(b.pending > 0, "parameter ", i, " counted into bucket ", bucket_of_[i],
                           " which waits for no member");
  return --b.pending == 0;
}

void BucketSet::launch(const std::shared_ptr<CommHook>& hook, const dist::Group& group) {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    const std::size_t index = next_launch_++;
    auto& b = buckets_[index];
    if (hook) {
      GradBucket view;
      view.index = static_cast<int64_t>(index);
      view.is_last = index + 1 == buckets_.size();
      view.buffer = b.flat;
      for (std::size_t i : b.members) {
        view.gradients.push_back(slot(i).view_as(params_[i]));
        view.parameters.push_back(params_[i]);
      }
      b.hooked = hook->run(view, group);
    } else {
      b.work = dist::all_reduce_async(b.flat, dist::ReduceOp::kSum, group);
    }
  }
}

void BucketSet::wait_launched() {
  for (std::size_t k = 0; k < next_launch_; ++k) buckets_[k].wait();
}

void BucketSet::wait_all() {
  for (auto& b : buckets_) b.wait();
}

void BucketSet::zero_all() {
  for (auto& b : buckets_) {
    b.flat.zero_();
    b.pending = 0;
  }
  next_launch_ = 0;
}

void BucketSet::scale_all(double factor) {
  for (auto& b : buckets_) b.flat.mul_(factor);
}

void BucketSet::write_back(const at::Tensor& used) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& grad = params_[i].mutable_grad();
    if (grad_in_bucket(i)) continue;
    at::Tensor averaged = slot(i).view_as(params_[i]);
    if (grad.defined()) {
      if (grad_views_.empty()) grad.copy_(averaged);
      else grad = grad_views_[i];
    } else if (!used.defined() || used[static_cast<int64_t>(i)].item<int>() > 0) {
      // Unused here but used elsewhere: take the others' average.
      grad = grad_views_.empty() ? averaged.clone() : grad_views_[i];
    }
  }
}

void BucketSet::reset() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (auto& b : buckets_) {
    b.pending = b.members.size();
    b.work = dist::Work();
    b.hooked.reset();
  }
  next_launch_ = 0;
}

}  // namespace detail
}  // namespace nn
}  // namespace kindling
