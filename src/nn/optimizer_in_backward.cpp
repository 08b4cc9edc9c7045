// The optimizer inside backward (kindling/nn/optimizer_in_backward.h): one inner optimizer per
// parameter, so that any set of parameters (a bucket's, or those backward did not step) can be
// stepped alone, and a comm hook that steps a bucket's parameters once its average is in.
#include "kindling/nn/optimizer_in_backward.h"

#include <ATen/ATen.h>

#include <string>
#include <unordered_map>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "optimizer_kind.h"

namespace kindling {
namespace nn {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamGroup;

struct OptimizerInBackward::Impl {
  OptimizerInBackward* owner = nullptr;  // null once the optimizer is gone (a hook may outlive it)
  std::vector<at::Tensor> params;        // every parameter, group by group
  std::vector<std::size_t> group_of;
  std::unordered_map<const void*, std::size_t> index;  // TensorImpl -> position in `params`
  std::vector<std::unique_ptr<torch::optim::Optimizer>> inner;  // one per parameter
  std::vector<char> stepped;             // by backward since the last step()

  // Steps parameter i with its group's current options (a scheduler may have changed them).
  void step_one(std::size_t i) {
    inner[i]->param_groups()[0].set_options(owner->param_groups()[group_of[i]].options().clone());
    inner[i]->step();
    stepped[i] = 1;
  }
};

namespace {

// A bucket being averaged; on wait its average goes into the parameters' .grad() and they step.
class StepAfterReduce : public PendingBucket {
 public:
  StepAfterReduce(std::shared_ptr<OptimizerInBackward::Impl> impl, GradBucket bucket, dist::Work work,
                  std::unique_ptr<PendingBucket> reduce, int size)
      : impl_(std::move(impl)), bucket_(std::move(bucket)), work_(std::move(work)), reduce_(std::move(reduce)),
        size_(size) {}
  void wait() override {
    if (reduce_) {
      reduce_->wait();
    } else {
      work_.wait();
      bucket_.buffer.div_(size_);  // as DDP's own: the sum, then the division
    }
    KINDLING_CHECK(impl_->owner != nullptr, "kindling::nn::OptimizerInBackward: the optimizer was destroyed while "
                   "the DDP model that uses its comm_hook() still trains; keep the optimizer alive as long as the model");
    at::NoGradGuard no_grad;
    for (std::size_t k = 0; k < bucket_.parameters.size(); ++k) {
      auto it = impl_->index.find(bucket_.parameters[k].unsafeGetTensorImpl());
      KINDLING_CHECK(it != impl_->index.end(), "kindling::nn::OptimizerInBackward: the DDP model has a parameter "
                     "this optimizer does not have; build the optimizer over the model's parameters() (all of them)");
      at::Tensor& grad = bucket_.parameters[k].mutable_grad();
      const at::Tensor& average = bucket_.gradients[k];
      if (!grad.defined()) {
        grad = average.clone();
      } else if (grad.data_ptr() != average.data_ptr()) {
        grad.copy_(average);  // DDP copies it too after the hooks: the same values
      }
      impl_->step_one(it->second);
    }
  }

 private:
  std::shared_ptr<OptimizerInBackward::Impl> impl_;
  GradBucket bucket_;
  dist::Work work_;
  std::unique_ptr<PendingBucket> reduce_;
  int size_;
};

class InBackwardHook : public CommHook {
 public:
  InBackwardHook(std::shared_ptr<OptimizerInBackward::Impl> impl, std::shared_ptr<CommHook> reduce)
      : impl_(std::move(impl)), reduce_(std::move(reduce)) {}
  std::string name() const override {
    std::string name = "optimizer_in_backward";  // appends: GCC 12 misreads `"(" + std::string&&`
    if (reduce_) {
      name += '(';
      name += reduce_->name();
      name += ')';
    }
    return name;
  }
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override {
    std::unique_ptr<PendingBucket> reduce;
    dist::Work work;
    if (reduce_) {
      reduce = reduce_->run(bucket, group);
    } else {
      work = dist::all_reduce_async(bucket.buffer, dist::ReduceOp::kSum, group);
    }
    return std::make_unique<StepAfterReduce>(impl_, bucket, std::move(work), std::move(reduce), group.size());
  }
  StateDict state_dict() const override { return reduce_ ? reduce_->state_dict() : new_state_dict(); }
  void load_state_dict(const StateDict& state) override {
    if (reduce_) {
      reduce_->load_state_dict(state);
    } else {
      CommHook::load_state_dict(state);
    }
  }

 private:
  std::shared_ptr<OptimizerInBackward::Impl> impl_;
  std::shared_ptr<CommHook> reduce_;
};

}  // namespace

OptimizerInBackward::OptimizerInBackward(std::vector<OptimizerParamGroup> param_groups, const OptimizerOptions& defaults)
    : Optimizer(detail::checked_groups(std::move(param_groups), defaults, "kindling::nn::OptimizerInBackward"),
                defaults.clone()),
      impl_(std::make_shared<Impl>()) {
  Impl& s = *impl_;
  s.owner = this;
  for (std::size_t g = 0; g < this->param_groups().size(); ++g) {
    for (const auto& p : this->param_groups()[g].params()) {
      s.index[p.unsafeGetTensorImpl()] = s.params.size();
      s.params.push_back(p);
      s.group_of.push_back(g);
      s.inner.push_back(detail::make_optimizer(
          defaults, {OptimizerParamGroup({p}, this->param_groups()[g].options().clone())}));
    }
  }
  s.stepped.assign(s.params.size(), 0);
}

OptimizerInBackward::OptimizerInBackward(std::vector<at::Tensor> params, const OptimizerOptions& defaults)
    : OptimizerInBackward(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

OptimizerInBackward::~OptimizerInBackward() { impl_->owner = nullptr; }

std::shared_ptr<CommHook> OptimizerInBackward::comm_hook(std::shared_ptr<CommHook> reduce) {
  return std::make_shared<InBackwardHook>(impl_, std::move(reduce));
}

at::Tensor OptimizerInBackward::step(LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  at::NoGradGuard no_grad;
  Impl& s = *impl_;
  for (std::size_t i = 0; i < s.params.size(); ++i)
    if (!s.stepped[i]) s.step_one(i);
  std::fill(s.stepped.begin(), s.stepped.end(), 0);
  return loss;
}

int64_t OptimizerInBackward::stepped_in_backward() const {
  int64_t n = 0;
  for (char c : impl_->stepped) n += c;
  return n;
}

StateDict OptimizerInBackward::state_dict() const {
  StateDict sd = optimizer_state_dict(*this);  // the groups' options; the base holds no state
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  for (std::size_t i = 0; i < impl_->inner.size(); ++i) {
    const auto mine = optimizer_state_dict(*impl_->inner[i]).at("state").toGenericDict();
    if (mine.contains(0)) state.insert(static_cast<int64_t>(i), mine.at(0));
  }
  sd.insert_or_assign("state", state);
  return sd;
}

void OptimizerInBackward::load_state_dict(const StateDict& state) {
  const auto states = detail::load_group_options(*this, state, "kindling::nn::OptimizerInBackward::load_state_dict");
  for (std::size_t i = 0; i < impl_->inner.size(); ++i) {
    StateDict one = optimizer_state_dict(*impl_->inner[i]);
    c10::impl::GenericDict entry(c10::IntType::get(), c10::AnyType::get());
    if (states.contains(static_cast<int64_t>(i))) entry.insert(0, states.at(static_cast<int64_t>(i)));
    one.insert_or_assign("state", entry);
    load_optimizer_state_dict(*impl_->inner[i], one);
  }
}

void OptimizerInBackward::save(torch::serialize::OutputArchive&) const {
  KINDLING_CHECK(false, "kindling::nn::OptimizerInBackward::save: its state lives in inner optimizers; use "
                 "state_dict() or kindling::handlers::stateful(optimizer)");
}
void OptimizerInBackward::load(torch::serialize::InputArchive&) {
  KINDLING_CHECK(false, "kindling::nn::OptimizerInBackward::load: its state lives in inner optimizers; use "
                 "load_state_dict() or kindling::handlers::stateful(optimizer)");
}

}  // namespace nn
}  // namespace kindling
