// Join for uneven inputs (kindling/nn/join.h): the training ranks' count of who still trains,
// a joined rank's mirror of their steps, and the final broadcast from the last rank to join.
#include "kindling/nn/join.h"

#include <ATen/ATen.h>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "nn/ddp_state.h"

namespace kindling {
namespace nn {

void GradientReducer::State::notify_join() {
  active = dist::all_reduce(int64_t{1}, dist::ReduceOp::kSum, options.group());
}

void GradientReducer::State::rescale_for_join() {
  if (!joining || divide_by_initial_world || active <= 0 || active >= world) return;
  const double factor = static_cast<double>(world) / static_cast<double>(active);
  for (auto& b : buckets) b.flat.mul_(factor);
}

void GradientReducer::State::shadow_backward() {
  std::lock_guard<std::mutex> lock(mu);
  at::NoGradGuard no_grad;
  for (auto& b : buckets) {
    b.flat.zero_();
    b.pending = 0;
  }
  next_launch = 0;
  launch_in_order();
  // As finish_backward: the unused-parameter count after the buckets, this rank using none.
  at::Tensor used;
  dist::Work used_work;
  if (options.find_unused_parameters()) {
    used = at::zeros({static_cast<int64_t>(params.size())}, at::TensorOptions().dtype(at::kInt).device(params[0].device()));
    used_work = dist::all_reduce_async(used, dist::ReduceOp::kSum, options.group());
  }
  for (auto& b : buckets) b.wait();
  if (used.defined()) {
    used_work.wait();
    used = used.cpu();
  }
  rescale_for_join();
  write_back(used);
  reset_iteration();
}

Join::Join(GradientReducer* reducer, JoinOptions options) {
  if (reducer == nullptr) return;
  state_ = reducer->state_;
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  KINDLING_CHECK(!s.options.static_graph(), "kindling::nn::Join: the model was built with "
                 "DdpOptions::static_graph, whose first backward learns the graph on every rank; a rank that "
                 "joins early cannot mirror it: build the model without static_graph to train with Join");
  KINDLING_CHECK(s.autotune.done, "kindling::nn::Join: the model's bucket autotune (autotune_bucket_cap_mb) has "
                 "not finished; it remakes the buckets at steps a joined rank cannot mirror: make the Join after it "
                 "(GradientReducer::bucket_autotune() has a score for every size) or set bucket_cap_mb instead");
  const auto& hook = s.options.comm_hook();
  const std::string refusal = hook ? hook->join_needs().refusal : std::string();
  KINDLING_CHECK(refusal.empty(), "kindling::nn::Join: ", refusal);
  KINDLING_CHECK(!s.joining, "kindling::nn::Join: the model is already in a Join that is still alive; one Join "
                 "per model at a time");
  s.joining = true;
  s.divide_by_initial_world = options.divide_by_initial_world_size();
  s.active = s.world;
  // Every rank must agree on the buckets, and a rank may join before its first backward.
  s.rebuilt = true;
}

Join::~Join() {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->joining = false;
  state_->active = state_->world;
}

void Join::join(const std::function<void()>& after_each_backward) {
  if (!state_) return;
  auto& s = *state_;
  KINDLING_CHECK(!joined_, "kindling::nn::Join::join: called twice on rank ", dist::get_rank(),
                 "; call it once, after this rank's last batch");
  const auto& hook = s.options.comm_hook();
  const std::string step = hook ? hook->join_needs().step : std::string();
  KINDLING_CHECK(after_each_backward || step.empty(), "kindling::nn::Join::join: ", step);
  joined_ = true;
  const dist::Group& group = s.options.group();
  while (true) {
    const int64_t active = dist::all_reduce(int64_t{0}, dist::ReduceOp::kSum, group);
    if (active == 0) break;
    s.active = active;
    ++shadowed_;
    if (s.options.broadcast_buffers() && !s.buffers.empty()) {
      at::NoGradGuard no_grad;
      detail::broadcast_coalesced(s.buffers, s.src, group);
    }
    s.shadow_backward();
    if (after_each_backward) after_each_backward();
  }
  // The last rank to join (the highest of them) holds the model every rank ends with.
  const int64_t last = dist::all_reduce(int64_t{shadowed_ == 0 ? group.rank() : -1}, dist::ReduceOp::kMax, group);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> model;
  for (const auto& p : s.params) model.push_back(p.detach());
  for (const auto& b : s.buffers) model.push_back(b);
  detail::broadcast_coalesced(model, group.ranks()[static_cast<std::size_t>(last)], group);
  s.active = s.world;
}

}  // namespace nn
}  // namespace kindling
