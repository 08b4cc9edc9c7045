// The built-in communication hooks of kindling's DDP (kindling/nn/comm_hook.h).
#include "kindling/nn/comm_hook.h"

#include <ATen/ATen.h>

#include "kindling/dist/dist.h"
#include "kindling/dist/hierarchy.h"
#include "kindling/error.h"

namespace kindling {
namespace nn {

PendingBucket::~PendingBucket() = default;
CommHook::~CommHook() = default;
StateDict CommHook::state_dict() const { return new_state_dict(); }
JoinNeeds CommHook::join_needs() const { return {}; }
void CommHook::load_state_dict(const StateDict& state) {
  KINDLING_CHECK(state.empty(), "kindling::nn::CommHook::load_state_dict: the hook '", name(),
                 "' keeps no state, but the checkpoint holds ", state.size(),
                 " entries for it; was it saved from another hook (such as powerSGD_hook)?");
}

namespace {

// A sum all-reduce of `reduced` (already divided by the group's size) in flight; on wait the
// result is copied into `buffer` unless it is the buffer itself.
class ReducedCopy : public PendingBucket {
 public:
  ReducedCopy(dist::Work work, at::Tensor reduced, at::Tensor buffer)
      : work_(std::move(work)), reduced_(std::move(reduced)), buffer_(std::move(buffer)) {}
  void wait() override {
    work_.wait();
    if (!reduced_.is_same(buffer_)) buffer_.copy_(reduced_);
  }

 private:
  dist::Work work_;
  at::Tensor reduced_, buffer_;
};

// Averages the buffer in `dtype` (the buffer's own dtype: no compression).
class CastAllReduce : public CommHook {
 public:
  CastAllReduce(std::string name, std::optional<at::ScalarType> dtype) : name_(std::move(name)), dtype_(dtype) {}
  std::string name() const override { return name_; }
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override {
    at::Tensor reduced = dtype_ && *dtype_ != bucket.buffer.scalar_type() ? bucket.buffer.to(*dtype_) : bucket.buffer;
    reduced.div_(group.size());
    auto work = dist::all_reduce_async(reduced, dist::ReduceOp::kSum, group);
    return std::make_unique<ReducedCopy>(std::move(work), reduced, bucket.buffer);
  }

 private:
  std::string name_;
  std::optional<at::ScalarType> dtype_;
};

// A bucket's hierarchical all-reduce: its in-host step starts as the bucket completes, the
// leaders' step follows as soon as that is done, both while backward goes on.
class HierarchicalBucket : public PendingBucket {
 public:
  explicit HierarchicalBucket(dist::HostHierarchy::Reduction reduction) : reduction_(std::move(reduction)) {}
  void wait() override { reduction_.wait(); }

 private:
  dist::HostHierarchy::Reduction reduction_;
};

class HierarchicalAllReduce : public CommHook {
 public:
  explicit HierarchicalAllReduce(std::shared_ptr<const dist::HostHierarchy> hosts) : hosts_(std::move(hosts)) {}
  std::string name() const override { return "hierarchical_allreduce"; }
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override {
    KINDLING_CHECK(group.size() == dist::get_world_size(),
                   "kindling::nn::hierarchical_allreduce_hook: the DDP group has ", group.size(), " of the world's ",
                   dist::get_world_size(),
                   " ranks; the hierarchy spans the world, so use it with a model on the world group");
    bucket.buffer.div_(group.size());
    return std::make_unique<HierarchicalBucket>(hosts_->all_reduce_async(bucket.buffer));
  }

 private:
  std::shared_ptr<const dist::HostHierarchy> hosts_;
};

}  // namespace

std::shared_ptr<CommHook> hierarchical_allreduce_hook() {
  return hierarchical_allreduce_hook(std::make_shared<dist::HostHierarchy>());
}
std::shared_ptr<CommHook> hierarchical_allreduce_hook(std::shared_ptr<const dist::HostHierarchy> hosts) {
  KINDLING_CHECK(hosts != nullptr, "kindling::nn::hierarchical_allreduce_hook: the host hierarchy is null");
  return std::make_shared<HierarchicalAllReduce>(std::move(hosts));
}

std::shared_ptr<CommHook> allreduce_hook() { return std::make_shared<CastAllReduce>("allreduce", std::nullopt); }
std::shared_ptr<CommHook> fp16_compress_hook() { return std::make_shared<CastAllReduce>("fp16_compress", at::kHalf); }
std::shared_ptr<CommHook> bf16_compress_hook() {
  return std::make_shared<CastAllReduce>("bf16_compress", at::kBFloat16);
}

}  // namespace nn
}  // namespace kindling
