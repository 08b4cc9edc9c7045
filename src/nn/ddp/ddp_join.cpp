// Join for uneven inputs (kindling/nn/join.h): the training ranks' count of who still trains,
// a joined rank's mirror of their steps, and the final broadcast from the last rank to join.
#include "kindling/nn/join.h"

#include <ATen/ATen.h>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "nn/ddp/ddp_state.h"

namespace kindling {
namespace nn {

void GradientReducer::State::notify_join() {
  join_.set_active(dist::all_reduce(int64_t{1}, dist::ReduceOp::kSum, options_.group()));
}

void GradientReducer::State::rescale_for_join() {
  const auto factor = join_.rescale(world_);
  if (factor) buckets_.scale_all(*factor);
}

void GradientReducer::State::shadow_backward() {
  std::lock_guard<std::mutex> lock(mu_);
  at::NoGradGuard no_grad;
  buckets_.zero_all();
  launch_in_order();
  // As finish_backward: the unused-parameter count after the buckets, this rank using none.
  at::Tensor used;
  dist::Work used_work;
  if (options_.find_unused_parameters()) {
    used = at::zeros({static_cast<int64_t>(params_.size())}, at::TensorOptions().dtype(at::kInt).device(params_[0].device()));
    used_work = dist::all_reduce_async(used, dist::ReduceOp::kSum, options_.group());
  }
  buckets_.wait_all();
  if (used.defined()) {
    used_work.wait();
    used = used.cpu();
  }
  rescale_for_join();
  buckets_.write_back(used);
  reset_iteration();
}

void GradientReducer::State::enter_join(bool divide_by_initial_world) {
  join_.enter(divide_by_initial_world, world_);
  // Every rank must agree on the buckets, and a rank may join before its first backward.
  rebuild_.freeze();
}

void GradientReducer::State::leave_join() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  join_.leave(world_);
}

void GradientReducer::State::mirror_step(int64_t active) {
  join_.set_active(active);
  if (options_.broadcast_buffers() && !buffers_.empty()) {
    at::NoGradGuard no_grad;
    detail::broadcast_coalesced(buffers_, src_, options_.group());
  }
  shadow_backward();
}

void GradientReducer::State::broadcast_model(int from) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> model;
  for (const auto& p : params_) model.push_back(p.detach());
  for (const auto& b : buffers_) model.push_back(b);
  detail::broadcast_coalesced(model, from, options_.group());
  join_.set_active(world_);
}

Join::Join(GradientReducer* reducer, JoinOptions options) {
  if (reducer == nullptr) return;
  state_ = reducer->state_;
  const auto lock = state_->lock();
  const auto s = state_->join_facts();
  KINDLING_CHECK(!s.options.static_graph(), "kindling::nn::Join: the model was built with "
                 "DdpOptions::static_graph, whose first backward learns the graph on every rank; a rank that "
                 "joins early cannot mirror it: build the model without static_graph to train with Join");
  KINDLING_CHECK(s.autotune_done, "kindling::nn::Join: the model's bucket autotune (autotune_bucket_cap_mb) has "
                 "not finished; it remakes the buckets at steps a joined rank cannot mirror: make the Join after it "
                 "(GradientReducer::bucket_autotune() has a score for every size) or set bucket_cap_mb instead");
  const auto& hook = s.options.comm_hook();
  const std::string refusal = hook ? hook->join_needs().refusal : std::string();
  KINDLING_CHECK(refusal.empty(), "kindling::nn::Join: ", refusal);
  KINDLING_CHECK(!s.joining, "kindling::nn::Join: the model is already in a Join that is still alive; one Join "
                 "per model at a time");
  state_->enter_join(options.divide_by_initial_world_size());
}

Join::~Join() {
  if (state_) state_->leave_join();
}

void Join::join(const std::function<void()>& after_each_backward) {
  if (!state_) return;
  const auto s = state_->join_facts();
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
    ++shadowed_;
    state_->mirror_step(active);
    if (after_each_backward) after_each_backward();
  }
  // The last rank to join (the highest of them) holds the model every rank ends with.
  const int64_t last = dist::all_reduce(int64_t{shadowed_ == 0 ? group.rank() : -1}, dist::ReduceOp::kMax, group);
  state_->broadcast_model(group.ranks()[static_cast<std::size_t>(last)]);
}

}  // namespace nn
}  // namespace kindling
