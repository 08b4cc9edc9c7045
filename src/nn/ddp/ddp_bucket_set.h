#pragma once
// DistributedDataParallel's gradient buckets (owned by GradientReducer::State, src/nn/ddp/ddp_state.h):
// each bucket's flat buffer and members, each parameter's place in it, and one backward's
// progress through them: which gradients are in, how many each bucket still waits for, and
// which buckets were launched (in index order, so that every rank's reductions pair up).
//
// Invariants, kept by every method:
//  * bucket_of_, offset_of_ and ready_ have one entry per parameter once make() ran; grad_views_
//    has one per parameter with gradient_as_bucket_view, none without.
//  * next_launch_ <= buckets_.size(); the buckets below next_launch_ were launched in this
//    backward (their pending is 0), none above it.
//  * a bucket's pending counts its members not counted in (count()) since reset(): each
//    member is counted at most once per backward, so pending never goes below 0.
// Not thread-safe: the reducer calls it under its lock.
#include <ATen/ATen.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/nn/comm_hook.h"

namespace kindling {
namespace nn {
namespace detail {

class BucketSet {
 public:
  // The set for `params` (the reducer's, which outlive it and keep their count); empty until make().
  explicit BucketSet(const std::vector<at::Tensor>& params) : params_(params) {}
  BucketSet(const BucketSet&) = delete;
  BucketSet& operator=(const BucketSet&) = delete;
  // Each gradient that is its place in a bucket becomes a copy: the gradients outlive the
  // buckets (and the mpi backend's shared window, freed at finalize).
  ~BucketSet();

  // Makes the buckets from `order` (detail::assign_buckets' rule with `cap_mb`), each with its
  // zeroed buffer from dist::empty_comm_buffer over `group`, each parameter's bucket, offset and
  // (`as_view`: gradient_as_bucket_view) place. Sizes ready_ on the first call.
  void make(const std::vector<std::size_t>& order, double cap_mb, bool as_view, const dist::Group& group);
  // As make(), the gradients that lived in the old buckets moved into their places in the new ones.
  void remake(const std::vector<std::size_t>& order, double cap_mb, bool as_view, const dist::Group& group);
  // Whether the buckets are those of `groups` (the members of each, in order).
  bool same_as(const std::vector<std::vector<std::size_t>>& groups) const;
  // The members of every bucket, bucket after bucket (the order the buckets were made from).
  std::vector<std::size_t> order() const;

  std::size_t size() const { return buckets_.size(); }
  const std::vector<std::size_t>& members(std::size_t bucket) const { return buckets_[bucket].members; }

  // Parameter i's place in its bucket's flat buffer (1-D).
  at::Tensor slot(std::size_t i) const {
    return buckets_[bucket_of_[i]].flat.narrow(0, offset_of_[i], params_[i].numel());
  }
  // Whether parameter i's gradient is its place in the bucket (not a tensor the user or
  // AccumulateGrad put there instead, e.g. after the gradient was reset to none).
  bool grad_in_bucket(std::size_t i) const {
    return !grad_views_.empty() && params_[i].grad().unsafeGetTensorImpl() == grad_views_[i].unsafeGetTensorImpl();
  }

  bool ready(std::size_t i) const { return ready_[i] != 0; }
  void set_ready(std::size_t i) { ready_[i] = 1; }
  // Puts parameter i's gradient (dense, defined) into its place: times `scale` unless `hooked`
  // (a hook gets the sum's terms and averages itself); with gradient_as_bucket_view the gradient
  // becomes its place from now on.
  void copy_in(std::size_t i, const at::Tensor& scale, bool hooked);
  // Counts parameter i in; true when that completes its bucket.
  bool count(std::size_t i);
  // Parameter i's place zeroed and counted in (a parameter with no gradient in this backward).
  void count_zero(std::size_t i) {
    slot(i).zero_();
    count(i);
  }
  // Launches the complete buckets from next_launch_ on, in index order, stopping at the first
  // incomplete one: through `hook` when there is one, else a sum all-reduce over `group`.
  void launch(const std::shared_ptr<CommHook>& hook, const dist::Group& group);
  // Waits for the buckets launched in this backward.
  void wait_launched();
  // Waits for every bucket (one never launched has nothing to wait for).
  void wait_all();
  // A joined rank's backward: every buffer zeroed, every bucket complete, none launched.
  void zero_all();
  // Every buffer times `factor`.
  void scale_all(double factor);
  // Puts the buckets' averages into the parameters' .grad() (`used`: which parameters some rank
  // used, with find_unused_parameters; else undefined). A gradient that is its place in the
  // bucket already holds its average.
  void write_back(const at::Tensor& used);
  // Ready for the next backward: no gradient in, every bucket waiting for all its members,
  // none launched.
  void reset();

 private:
  struct Bucket {
    std::vector<std::size_t> members;       // parameter indices
    at::Tensor flat;                        // one buffer for all members' gradients
    std::size_t pending = 0;                // members not counted in yet
    dist::Work work;                        // without a hook
    std::unique_ptr<PendingBucket> hooked;  // with DdpOptions::comm_hook
    void wait();
  };

  const std::vector<at::Tensor>& params_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<int64_t> offset_of_;
  // With gradient_as_bucket_view: each parameter's place in its bucket, shaped as the parameter,
  // which becomes its .grad(). Made by set_() on the bucket's storage rather than as a view op,
  // so that it is an ordinary tensor to autograd: LibTorch 1.13's Optimizer::zero_grad() calls
  // detach_() on every gradient, which autograd refuses for a view.
  std::vector<at::Tensor> grad_views_;
  std::vector<char> ready_;
  std::size_t next_launch_ = 0;
};

}  // namespace detail
}  // namespace nn
}  // namespace kindling
