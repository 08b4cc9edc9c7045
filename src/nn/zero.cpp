// ZeroRedundancyOptimizer: construction, the layout of this rank's parts, and step
// (kindling/nn/zero.h). The consolidated state dict is in zero_state.cpp.
#include <ATen/ATen.h>

#include <string>
#include <unordered_map>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/nn/optimizer_state.h"
#include "optimizer_kind.h"
#include "zero_impl.h"

namespace kindling {
namespace nn {
namespace {

using torch::optim::OptimizerOptions;
using torch::optim::OptimizerParamGroup;

at::Tensor flat(const at::Tensor& t) { return t.detach().view(-1); }

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<OptimizerParamGroup> param_groups,
                                                 const OptimizerOptions& defaults)
    : Optimizer(detail::checked_groups(std::move(param_groups), defaults, "kindling::nn::ZeroRedundancyOptimizer"), defaults.clone()), impl_(std::make_shared<Impl>()) {
  impl_->hook = zero::make_hook(impl_->records);
  impl_->defaults = defaults.clone();
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> params, const OptimizerOptions& defaults)
    : ZeroRedundancyOptimizer(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

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
    KINDLING_CHECK(count == params.size() && groups.size() == inner_group.size(), what, "the parameter groups "
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
  pieces = l.pieces_of(l.rank, group_of);
  layout = std::move(l);
  views.clear();
  std::vector<std::vector<at::Tensor>> by_group(groups.size());
  for (const auto& piece : pieces) {
    views.push_back(part(piece, params[piece.param].detach()));
    by_group[group_of[piece.param]].push_back(views.back());
  }
  std::vector<OptimizerParamGroup> inner_groups;
  inner_group.assign(groups.size(), -1);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (by_group[g].empty()) continue;
    inner_group[g] = static_cast<int>(inner_groups.size());
    inner_groups.emplace_back(by_group[g], groups[g].options().clone());
  }
  if (!inner_groups.empty()) inner = detail::make_optimizer(*defaults, std::move(inner_groups));
  if (pending) apply_pending();
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
  if (s.inner) {
    for (std::size_t g = 0; g < param_groups().size(); ++g)
      if (s.inner_group[g] >= 0) s.inner->param_groups()[s.inner_group[g]].set_options(param_groups()[g].options().clone());
    for (std::size_t i = 0; i < s.pieces.size(); ++i) {
      const at::Tensor& grad = s.params[s.pieces[i].param].grad();
      s.views[i].mutable_grad() = grad.defined() ? s.part(s.pieces[i], grad) : at::Tensor();
    }
    s.inner->step();
    for (auto& v : s.views) v.mutable_grad() = at::Tensor();  // no second reference to the gradients
  }
  const zero::Layout& l = *s.layout;
  if (l.size == 1) return loss;
  // Every rank's updated chunk of every bucket, to every rank.
  for (const auto& b : l.buckets) {
    const int64_t each = (b.numel + l.size - 1) / l.size;
    if (each == 0) continue;
    const auto [lo, hi] = zero::chunk(b.numel, l.rank, l.size);
    at::Tensor mine = at::zeros({each}, s.params[b.params.front()].options());
    zero::for_each_overlap(b, lo, hi, [&](std::size_t m, int64_t offset, int64_t pos, int64_t length) {
      mine.narrow(0, pos - lo, length).copy_(flat(s.params[b.params[m]]).narrow(0, offset, length));
    });
    const at::Tensor all = dist::all_gather(mine, s.group);
    for (int q = 0; q < l.size; ++q) {
      if (q == l.rank) continue;
      const auto [qlo, qhi] = zero::chunk(b.numel, q, l.size);
      zero::for_each_overlap(b, qlo, qhi, [&](std::size_t m, int64_t offset, int64_t pos, int64_t length) {
        flat(s.params[b.params[m]]).narrow(0, offset, length).copy_(all.narrow(0, q * each + pos - qlo, length));
      });
    }
  }
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
