// ZeroRedundancyOptimizer: construction, the layout of this rank's parts, and step
// (kindling/nn/zero.h). The consolidated state dict is in zero_state.cpp.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/nn/optimizer_state.h"
#include "nn/optimizer_kind.h"
#include "zero_impl.h"

namespace kindling {
namespace nn {
namespace {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamGroup;

// A gradient accumulator's pre-hook: runs `check` before the gradient is accumulated.
class BeforeAccumulation : public torch::autograd::FunctionPreHook {
 public:
  explicit BeforeAccumulation(std::function<void()> check) : check_(std::move(check)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    check_();
    return grads;
  }

 private:
  std::function<void()> check_;
};

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<OptimizerParamGroup> param_groups,
                                                 const OptimizerOptions& defaults, ZeroOptions options)
    : Optimizer(detail::checked_groups(std::move(param_groups), defaults, "kindling::nn::ZeroRedundancyOptimizer"), defaults.clone()), impl_(std::make_shared<Impl>()) {
  impl_->owner = this;
  impl_->options = options;
  impl_->hook = zero::make_hook(impl_->records, options.overlap_with_ddp());
  impl_->defaults = defaults.clone();
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> params, const OptimizerOptions& defaults,
                                                 ZeroOptions options)
    : ZeroRedundancyOptimizer(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults,
                              options) {}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  std::lock_guard<std::mutex> lock(impl_->records->mu);
  impl_->owner = nullptr;
}

const ZeroOptions& ZeroRedundancyOptimizer::zero_options() const { return impl_->options; }

std::shared_ptr<CommHook> ZeroRedundancyOptimizer::comm_hook() const { return impl_->hook; }

dist::Group ZeroRedundancyOptimizer::group() const {
  std::lock_guard<std::mutex> lock(impl_->records->mu);
  return impl_->records->group ? *impl_->records->group : dist::Group();
}

at::Tensor ZeroRedundancyOptimizer::Impl::part(const zero::Piece& piece, const at::Tensor& whole) const {
  if (piece.bucket < 0) return whole;
  return whole.reshape(-1).narrow(0, piece.offset, piece.length);
}

void ZeroRedundancyOptimizer::Impl::ensure_layout(const std::vector<OptimizerParamGroup>& groups) {
  const char* what = "kindling::nn::ZeroRedundancyOptimizer: ";
  std::size_t count = 0;
  for (const auto& g : groups) count += g.params().size();
  if (layout) {
    KINDLING_CHECK(count == params.size() && groups.size() == inner_group.front().size(), what, "the parameter groups "
                   "changed since the first step (", params.size(), " parameters then, ", count, " now); the "
                   "shards follow the first layout: make a new optimizer (and DDP model) instead");
    return;
  }
  params.clear();
  group_of.clear();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      params.push_back(p);
      group_of.push_back(g);
    }
  }
  zero::Layout l = read_layout();
  pieces = l.pieces_of(l.rank, group_of);
  layout = std::move(l);
  make_inner(groups);
  if (pending) apply_pending();
  if (options.overlap_with_ddp() && layout->size > 1) {
    std::weak_ptr<Impl> weak = weak_from_this();
    std::lock_guard<std::mutex> lock(records->mu);
    records->after_reduce = [weak](const GradBucket& bucket) {
      auto impl = weak.lock();
      KINDLING_CHECK(impl && impl->owner, "kindling::nn::ZeroRedundancyOptimizer: the optimizer was destroyed while "
                     "the DDP model that uses its comm_hook() still trains; keep the optimizer alive as long as the model");
      impl->step_in_backward(bucket);
    };
    records->after_wait = [weak](const GradBucket& bucket) {
      auto impl = weak.lock();
      const auto b = static_cast<std::size_t>(bucket.index);
      if (impl && b < impl->gather_due.size() && impl->gather_due[b]) impl->start_gather(b);
    };
    guard_accumulations();
  }
}

bool ZeroRedundancyOptimizer::Impl::hides_versions() const {
  return options.overlap_with_ddp() && layout && layout->size > 1;
}

void ZeroRedundancyOptimizer::Impl::guard_accumulations() {
  stepped.assign(params.size(), 0);
  accumulators.clear();
  std::weak_ptr<Impl> weak = weak_from_this();
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    if (!accumulator) continue;  // no gradient: never stepped
    accumulator->add_pre_hook(std::make_unique<BeforeAccumulation>([weak, i] {
      auto impl = weak.lock();
      if (!impl) return;
      std::lock_guard<std::mutex> lock(impl->records->mu);
      KINDLING_CHECK(!impl->stepped[i], "kindling::nn::ZeroRedundancyOptimizer (overlap_with_ddp): a backward on rank ",
                     impl->group.rank(), " reached parameter ", i, " (shape ", impl->params[i].sizes(),
                     ") before step(), but the previous synchronised backward already stepped its chunk on this rank: "
                     "call optimizer.step() after every synchronised backward (accumulate inside model.no_sync() "
                     "instead). A second backward through the same graph (retain_graph) is not possible with "
                     "overlap_with_ddp: the weights that graph saved were stepped inside the first backward; make the "
                     "optimizer without overlap_with_ddp to backward twice through one graph");
    }));
    accumulators.push_back(std::move(accumulator));
  }
}

zero::Layout ZeroRedundancyOptimizer::Impl::read_layout() {
  const char* what = "kindling::nn::ZeroRedundancyOptimizer: ";
  zero::Layout l;
  {
    std::lock_guard<std::mutex> lock(records->mu);
    if (records->buckets.empty()) {
      const int world = dist::is_initialized() ? dist::get_world_size() : 1;
      KINDLING_CHECK(world == 1, what, "step() on rank ", dist::get_rank(), " of ", world, " before any "
                     "synchronised backward went through its comm_hook(): build the DDP model with "
                     "kindling::nn::DdpOptions().comm_hook(optimizer.comm_hook()) and call backward() first");
    } else {
      group = *records->group;
      l.rank = group.rank();
      l.size = group.size();
    }
    std::unordered_map<const void*, std::size_t> index;
    for (std::size_t i = 0; i < params.size(); ++i) index[params[i].unsafeGetTensorImpl()] = i;
    std::vector<char> bucketed(params.size(), 0);
    for (const auto& record : records->buckets) {
      zero::Bucket b;
      b.numel = record.numel;
      for (std::size_t m = 0; m < record.params.size(); ++m) {
        auto it = index.find(record.params[m]);
        KINDLING_CHECK(it != index.end(), what, "the DDP model has a parameter this optimizer does not have; "
                       "build the optimizer over the model's parameters() (all of them)");
        b.params.push_back(it->second);
        b.offsets.push_back(record.offsets[m]);
        b.numels.push_back(params[it->second].numel());
        bucketed[it->second] = 1;
      }
      l.buckets.push_back(std::move(b));
    }
    for (std::size_t i = 0; i < params.size(); ++i)
      if (!bucketed[i]) l.unbucketed.push_back(i);
  }
  return l;
}

void ZeroRedundancyOptimizer::Impl::make_inner(const std::vector<OptimizerParamGroup>& groups) {
  const std::size_t count = layout->buckets.size() + 1;  // the last: parameters in no bucket
  views.clear();
  std::vector<std::vector<std::vector<std::size_t>>> by(count, std::vector<std::vector<std::size_t>>(groups.size()));
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const at::Tensor& param = params[pieces[i].param];
    views.push_back(part(pieces[i], hides_versions() ? param.variable_data() : param.detach()));
    const std::size_t k = pieces[i].bucket < 0 ? count - 1 : static_cast<std::size_t>(pieces[i].bucket);
    by[k][group_of[pieces[i].param]].push_back(i);
  }
  inner.clear();
  inner.resize(count);
  inner_group.assign(count, std::vector<int>(groups.size(), -1));
  inner_pieces.assign(count, {});
  gathers.clear();
  gathers.resize(layout->buckets.size());
  gather_due.assign(layout->buckets.size(), 0);
  for (std::size_t k = 0; k < count; ++k) {
    std::vector<OptimizerParamGroup> inner_groups;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (by[k][g].empty()) continue;
      inner_group[k][g] = static_cast<int>(inner_groups.size());
      std::vector<at::Tensor> mine;
      for (std::size_t i : by[k][g]) {
        mine.push_back(views[i]);
        inner_pieces[k].push_back(i);
      }
      inner_groups.emplace_back(std::move(mine), groups[g].options().clone());
    }
    if (!inner_groups.empty()) inner[k] = detail::make_optimizer(*defaults, std::move(inner_groups));
  }
}

void ZeroRedundancyOptimizer::Impl::step_inner(std::size_t k, const std::vector<at::Tensor>* bucket_gradients) {
  if (!inner[k]) return;
  const auto& groups = owner->param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g)
    if (inner_group[k][g] >= 0) inner[k]->param_groups()[inner_group[k][g]].set_options(groups[g].options().clone());
  for (std::size_t i : inner_pieces[k]) {
    const zero::Piece& piece = pieces[i];
    const at::Tensor& grad = bucket_gradients ? (*bucket_gradients)[piece.member] : params[piece.param].grad();
    views[i].mutable_grad() = grad.defined() ? part(piece, grad) : at::Tensor();
  }
  inner[k]->step();
  for (std::size_t i : inner_pieces[k]) views[i].mutable_grad() = at::Tensor();  // no second reference to them
}

void ZeroRedundancyOptimizer::Impl::step_in_backward(const GradBucket& bucket) {
  const auto b = static_cast<std::size_t>(bucket.index);
  KINDLING_CHECK(b < gathers.size(), "kindling::nn::ZeroRedundancyOptimizer: DDP's bucket ", b, " is not among the ",
                 gathers.size(), " of the first step's layout; keep one DDP model per optimizer");
  at::NoGradGuard no_grad;
  {
    std::lock_guard<std::mutex> lock(records->mu);
    records->awaiting_step = true;
    for (std::size_t i : inner_pieces[b]) stepped[pieces[i].param] = 1;
  }
  step_inner(b, &bucket.gradients);
  gather_due[b] = 1;
}

void ZeroRedundancyOptimizer::Impl::start_gather(std::size_t b) {
  gather_due[b] = 0;
  gathers[b] = std::make_unique<zero::Gather>(layout->buckets[b], params, group);
}

at::Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable(true);
    loss = closure();
  }
  Impl& s = *impl_;
  s.ensure_layout(param_groups());
  at::NoGradGuard no_grad;
  const zero::Layout& l = *s.layout;
  // The buckets backward did not step, each all-gathered as soon as it is stepped (and those
  // backward stepped whose all-gather has not started); then every rank's updated chunks, in.
  for (std::size_t b = 0; b < l.buckets.size(); ++b) {
    if (s.gathers[b]) continue;
    if (!s.gather_due[b]) s.step_inner(b, nullptr);
    if (l.size > 1) s.start_gather(b);
  }
  s.step_inner(l.buckets.size(), nullptr);
  for (auto& gather : s.gathers) {
    if (!gather) continue;
    gather->finish();
    gather.reset();
  }
  // The views wrote without moving the parameters' versions (hides_versions): a graph saved
  // before this step fails autograd's check in a later backward, as with any optimizer.
  if (s.hides_versions())
    for (const auto& p : s.params) torch::autograd::impl::bump_version(p);
  std::lock_guard<std::mutex> lock(s.records->mu);
  s.records->awaiting_step = false;
  std::fill(s.stepped.begin(), s.stepped.end(), 0);
  return loss;
}

std::vector<at::Tensor> ZeroRedundancyOptimizer::local_gradients() {
  impl_->ensure_layout(param_groups());
  std::vector<at::Tensor> out;
  for (const auto& piece : impl_->pieces) {
    const at::Tensor& grad = impl_->params[piece.param].grad();
    if (grad.defined()) out.push_back(impl_->part(piece, grad));
  }
  return out;
}

void ZeroRedundancyOptimizer::save(torch::serialize::OutputArchive&) const {
  KINDLING_CHECK(false, "kindling::nn::ZeroRedundancyOptimizer::save: a LibTorch archive cannot hold a sharded "
                 "state; use state_dict() (on every rank) or kindling::handlers::stateful(optimizer)");
}
void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive&) {
  KINDLING_CHECK(false, "kindling::nn::ZeroRedundancyOptimizer::load: a LibTorch archive cannot hold a sharded "
                 "state; use load_state_dict() or kindling::handlers::stateful(optimizer)");
}

}  // namespace nn
}  // namespace kindling
