// One synchronised backward of DistributedDataParallel's reducer (src/nn/ddp/ddp_state.h): each
// gradient marked ready as autograd accumulates it, the buckets launched in index order, and at
// the end of backward the wait for them and the averages put into .grad().
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <sstream>

#include "kindling/error.h"
#include "nn/ddp/ddp_state.h"

namespace kindling {
namespace nn {

void GradientReducer::State::reset_iteration() {
  buckets_.reset();
  callback_queued_ = false;
  rebuild_.reset();
}

void GradientReducer::State::mark_ready(std::size_t i) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_) return;
  if (!callback_queued_) {
    std::weak_ptr<State> weak = shared_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([weak] {
      if (auto s = weak.lock()) s->finish_backward();
    });
    callback_queued_ = true;
    begin_iteration();
  }
  if (buckets_.ready(i)) {
    // Only a parameter the static graph had no gradient for is ready before its gradient.
    rebuild_.saw_early(names_[i]);
    return;
  }
  buckets_.set_ready(i);
  rebuild_.saw_ready(i);
  const at::Tensor& grad = params_[i].mutable_grad();
  KINDLING_CHECK(grad.defined() && !grad.is_sparse(), "kindling::nn::DistributedDataParallel: parameter '", names_[i],
                 "' has ", grad.defined() ? "a sparse" : "no",
                 " gradient after its accumulation; only dense "
                 "gradients are supported");
  buckets_.copy_in(i, scale_, options_.comm_hook() != nullptr);
  if (buckets_.count(i)) launch_in_order();
}

void GradientReducer::State::handle_missing(const std::vector<std::size_t>& missing, bool learn_unused) {
  if (missing.empty()) return;
  if (!learn_unused) {
    std::ostringstream list;
    for (std::size_t k = 0; k < missing.size() && k < 10; ++k) list << (k ? ", " : "") << names_[missing[k]];
    if (missing.size() > 10) list << ", ... (" << missing.size() << " in all)";
    // Finish what was started so that this rank's engine is left in a clean state.
    buckets_.wait_launched();
    reset_iteration();
    KINDLING_CHECK(false, "kindling::nn::DistributedDataParallel: ", missing.size(),
                   " parameter(s) got no gradient in this backward: ", list.str(),
                   ". Every parameter must take part in the loss on every rank, or construct the model with "
                   "DdpOptions().find_unused_parameters(true)");
  }
  for (std::size_t i : missing) buckets_.count_zero(i);
  launch_in_order();
}

void GradientReducer::State::finish_backward() {
  using Clock = detail::StepTimer::Clock;
  std::lock_guard<std::mutex> lock(mu_);
  const auto compute_end = Clock::now();
  at::NoGradGuard no_grad;
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!buckets_.ready(i)) missing.push_back(i);
  }
  require_same_graph(missing);
  // Unused parameters are allowed with find_unused_parameters, and in static_graph's first
  // backward, which learns them.
  const bool learn_unused =
      options_.find_unused_parameters() || (options_.static_graph() && !rebuild_.graph_known());
  handle_missing(missing, learn_unused);
  // With unused parameters allowed, learn which ones some rank used (after the buckets,
  // in the same order everywhere); a known static graph knows.
  at::Tensor used = rebuild_.graph_known() ? rebuild_.global_used() : at::Tensor();
  dist::Work used_work;
  if (learn_unused) {
    used = at::zeros({static_cast<int64_t>(params_.size())},
                     at::TensorOptions().dtype(at::kInt).device(params_[0].device()));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (buckets_.ready(i)) used[static_cast<int64_t>(i)] = 1;
    }
    used_work = dist::all_reduce_async(used, dist::ReduceOp::kSum, options_.group());
  }
  const auto wait_start = Clock::now();
  buckets_.wait_all();
  if (learn_unused) {
    used_work.wait();
    used = used.cpu();
  }
  const auto wait_end = Clock::now();
  timer_.waited(wait_start, wait_end);
  rescale_for_join();
  buckets_.write_back(used);
  if (!rebuild_.rebuilt() || (options_.static_graph() && !rebuild_.graph_known())) after_first_backward(missing, used);
  ++synchronized_;
  timer_.step_ended(synchronized_, options_.bucket_cap_mb(), compute_end, wait_end);
  autotune_.after_step(synchronized_, timer_.last(), options_.bucket_cap_mb(), options_.group(), [this](double cap) {
    // The buckets keep their order (that of readiness where the first backward rebuilt them).
    options_.bucket_cap_mb(cap);
    remake_buckets(buckets_.order());
  });
  reset_iteration();
}

}  // namespace nn
}  // namespace kindling
