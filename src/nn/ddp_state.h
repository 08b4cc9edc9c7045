#pragma once
// GradientReducer::State (include/kindling/nn/ddp.h): one DDP model's buckets and what one
// backward does with them: mark each gradient ready as autograd accumulates it, launch the
// buckets' reductions in index order, and at the end of backward wait for them and put the
// averages into .grad(). Built and hooked up by src/nn/ddp.cpp.
#include <ATen/ATen.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/nn/comm_hook.h"
#include "kindling/nn/ddp.h"
#include "kindling/timeline.h"

namespace kindling {
namespace nn {
namespace detail {
// Broadcasts `tensors` from global rank `src` over `group`, packed into one buffer per dtype
// (src/nn/ddp.cpp). A collective over the group.
void broadcast_coalesced(const std::vector<at::Tensor>& tensors, int src, const dist::Group& group);
}  // namespace detail

struct GradientReducer::State : std::enable_shared_from_this<GradientReducer::State> {
  struct Bucket {
    std::vector<std::size_t> members;       // parameter indices
    at::Tensor flat;                        // one buffer for all members' gradients
    std::size_t pending = 0;                // members whose gradient is not in yet
    dist::Work work;                        // without a hook
    std::unique_ptr<PendingBucket> hooked;  // with DdpOptions::comm_hook
    void wait() {
      if (hooked) {
        hooked->wait();
        hooked.reset();
      } else {
        work.wait();
      }
    }
  };

  DdpOptions options;
  int world = 1;
  at::Tensor scale;  // 1 / world as a 0-dim double (a wrapped number: keeps the gradients' dtype)
  int src = 0;
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  std::vector<at::Tensor> buffers;
  // The hooks live only while these do (a shared_ptr in LibTorch 1.13, an intrusive_ptr in 2.15).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()))> accumulators;
  std::vector<Bucket> buckets;
  std::vector<std::size_t> bucket_of;
  std::vector<int64_t> offset_of;
  // With gradient_as_bucket_view: each parameter's place in its bucket, shaped as the parameter,
  // which becomes its .grad(). Made by set_() on the bucket's storage rather than as a view op,
  // so that it is an ordinary tensor to autograd: LibTorch 1.13's Optimizer::zero_grad() calls
  // detach_() on every gradient, which autograd refuses for a view.
  std::vector<at::Tensor> grad_views;
  std::vector<char> ready;
  // The buckets' rebuild (src/nn/ddp_rebuild.cpp): the order this rank saw gradients become
  // ready in its first synchronised backward, and whether the buckets are past it.
  std::vector<std::size_t> ready_order;
  bool rebuilt = false;
  // static_graph, known after the first synchronised backward: the parameters this rank's graph
  // leaves without a gradient (marked ready with zeros as each backward starts), which ones some
  // rank used (1) or none (0), and the first sign in this backward that the graph changed.
  bool graph_known = false;
  std::vector<char> locally_unused;
  at::Tensor global_used;
  std::string graph_change;
  std::size_t next_launch = 0;
  bool callback_queued = false;
  bool sync = true;
  int64_t synchronized = 0;
  double last_wait_s = 0;  // the last synchronised backward's wait for its all-reduces
  // StepTimes: when this step's forward started and ended, when the last step ended.
  using Clock = std::chrono::steady_clock;
  Clock::time_point forward_start, forward_end, last_step_end;
  bool forward_timed = false;
  StepTimes times;
  // Join (src/nn/ddp_join.cpp): while one lives, each synchronised forward counts the ranks
  // still training (`active`) and a joined rank mirrors the step (shadow_backward).
  bool joining = false;
  bool divide_by_initial_world = true;
  int64_t active = 0;
  // DdpOptions::autotune_bucket_cap_mb (src/nn/ddp_autotune.cpp): the size being tried, its
  // steps' times, the scores so far; done when the best size is in use (or never started).
  struct Autotune {
    std::size_t trial = 0;
    std::vector<double> step_seconds;
    std::vector<BucketTrial> scores;
    bool done = true;
  } autotune;
  std::mutex mu;

  at::Tensor slot(std::size_t i) { return buckets[bucket_of[i]].flat.narrow(0, offset_of[i], params[i].numel()); }

  // Whether parameter i's gradient is its place in the bucket (not a tensor the user or
  // AccumulateGrad put there instead, e.g. after the gradient was reset to none).
  bool grad_in_bucket(std::size_t i) {
    return !grad_views.empty() && params[i].grad().unsafeGetTensorImpl() == grad_views[i].unsafeGetTensorImpl();
  }

  // The gradients must outlive the buckets (and the mpi backend's shared window, freed at
  // finalize): when the reducer goes, each gradient that is a bucket's place becomes a copy.
  ~State() {
    if (grad_views.empty()) return;
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (grad_in_bucket(i)) params[i].mutable_grad() = grad_views[i].clone();
    }
  }

  void reset_iteration() {
    std::fill(ready.begin(), ready.end(), 0);
    for (auto& b : buckets) {
      b.pending = b.members.size();
      b.work = dist::Work();
      b.hooked.reset();
    }
    next_launch = 0;
    callback_queued = false;
    graph_change.clear();
    if (!rebuilt) ready_order.clear();  // a first backward that failed: the next one records anew
  }

  // Defined in src/nn/ddp_rebuild.cpp.
  // The buckets made from `order` (detail::assign_buckets' rule), each with its zeroed buffer,
  // each parameter's bucket, offset and (gradient_as_bucket_view) place.
  void make_buckets(const std::vector<std::size_t>& order);
  // At the end of the first synchronised backward: the buckets made again in the order in which
  // the group's first rank saw gradients become ready (a broadcast over the group; every rank
  // runs it there), the gradients that lived in the old buckets moved into the new ones.
  void rebuild_buckets();
  // static_graph: as a synchronised backward starts, the parameters known unused marked ready.
  void begin_iteration();
  // static_graph: throws kindling::UsageError, after waiting for what was launched, when this
  // backward's graph is not the first one's (`missing`: parameters with no gradient now).
  void require_same_graph(const std::vector<std::size_t>& missing);
  // After the first synchronised backward: learns the graph (static_graph) and rebuilds the
  // buckets where that is done (`used`: which parameters some rank used, or undefined).
  void after_first_backward(const std::vector<std::size_t>& missing, const at::Tensor& used);

  // The buckets made again from `order`, the gradients that lived in the old ones moved into the
  // new ones (src/nn/ddp_rebuild.cpp).
  void remake_buckets(const std::vector<std::size_t>& order);
  // After each synchronised backward while the autotune runs: times the step, scores a size when
  // its steps are done (an all-reduce over the group), moves on to the next size or the best
  // (src/nn/ddp_autotune.cpp).
  void autotune_after_step();

  // Defined in src/nn/ddp_join.cpp.
  // Before a synchronised forward in join mode: counts the ranks still training.
  void notify_join();
  // A joined rank's mirror of one synchronised backward: every bucket reduced with zeros as this
  // rank's terms, the unused-parameter all-reduce, the averages put into .grad().
  void shadow_backward();
  // divide_by_initial_world_size(false): the buckets' averages over the ranks that trained.
  void rescale_for_join();

  // Buckets start in index order on every rank, so the all-reduces always pair up.
  void launch_in_order() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      const std::size_t index = next_launch++;
      auto& b = buckets[index];
      if (options.comm_hook()) {
        GradBucket view;
        view.index = static_cast<int64_t>(index);
        view.is_last = index + 1 == buckets.size();
        view.buffer = b.flat;
        for (std::size_t i : b.members) {
          view.gradients.push_back(slot(i).view_as(params[i]));
          view.parameters.push_back(params[i]);
        }
        b.hooked = options.comm_hook()->run(view, options.group());
      } else {
        b.work = dist::all_reduce_async(b.flat, dist::ReduceOp::kSum, options.group());
      }
    }
  }

  void mark_ready(std::size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!sync) return;
    if (!callback_queued) {
      std::weak_ptr<State> weak = shared_from_this();
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto s = weak.lock()) s->finish_backward();
      });
      callback_queued = true;
      begin_iteration();
    }
    if (ready[i]) {
      // Only a parameter the static graph had no gradient for is ready before its gradient.
      if (graph_known && graph_change.empty()) graph_change = names[i];
      return;
    }
    ready[i] = 1;
    if (!rebuilt) ready_order.push_back(i);
    at::Tensor& grad = params[i].mutable_grad();
    KINDLING_CHECK(grad.defined() && !grad.is_sparse(), "kindling::nn::DistributedDataParallel: parameter '", names[i],
                   "' has ", grad.defined() ? "a sparse" : "no",
                   " gradient after its accumulation; only dense "
                   "gradients are supported");
    if (grad_in_bucket(i)) {
      // Backward accumulated straight into the bucket: nothing to copy.
      if (!options.comm_hook()) grad.mul_(scale);
    } else {
      at::Tensor into = slot(i);
      if (options.comm_hook()) {
        into.copy_(grad.reshape({-1}));  // a hook gets the sum's terms and averages itself
      } else {
        // Scaled while copied (as c10d::Reducer does): one pass over the gradients, not two.
        at::mul_out(into, grad.reshape({-1}), scale);
      }
      if (!grad_views.empty()) grad = grad_views[i];  // from now on backward accumulates there
    }
    auto& b = buckets[bucket_of[i]];
    if (--b.pending == 0) launch_in_order();
  }

  void finish_backward() {
    std::lock_guard<std::mutex> lock(mu);
    const auto compute_end = Clock::now();
    at::NoGradGuard no_grad;
    std::vector<std::size_t> missing;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!ready[i]) missing.push_back(i);
    }
    require_same_graph(missing);
    // Unused parameters are allowed with find_unused_parameters, and in static_graph's first
    // backward, which learns them.
    const bool learn_unused = options.find_unused_parameters() || (options.static_graph() && !graph_known);
    if (!missing.empty()) {
      if (!learn_unused) {
        std::ostringstream list;
        for (std::size_t k = 0; k < missing.size() && k < 10; ++k) list << (k ? ", " : "") << names[missing[k]];
        if (missing.size() > 10) list << ", ... (" << missing.size() << " in all)";
        // Finish what was started so that this rank's engine is left in a clean state.
        for (std::size_t k = 0; k < next_launch; ++k) buckets[k].wait();
        reset_iteration();
        KINDLING_CHECK(false, "kindling::nn::DistributedDataParallel: ", missing.size(),
                       " parameter(s) got no gradient in this backward: ", list.str(),
                       ". Every parameter must take part in the loss on every rank, or construct the model with "
                       "DdpOptions().find_unused_parameters(true)");
      }
      for (std::size_t i : missing) {
        slot(i).zero_();
        --buckets[bucket_of[i]].pending;
      }
      launch_in_order();
    }
    // With unused parameters allowed, learn which ones some rank used (after the buckets,
    // in the same order everywhere); a known static graph knows.
    at::Tensor used = graph_known ? global_used : at::Tensor();
    dist::Work used_work;
    if (learn_unused) {
      used = at::zeros({static_cast<int64_t>(params.size())},
                       at::TensorOptions().dtype(at::kInt).device(params[0].device()));
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (ready[i]) used[static_cast<int64_t>(i)] = 1;
      }
      used_work = dist::all_reduce_async(used, dist::ReduceOp::kSum, options.group());
    }
    const auto wait_start = Clock::now();
    for (auto& b : buckets) b.wait();
    if (learn_unused) {
      used_work.wait();
      used = used.cpu();
    }
    const auto wait_end = Clock::now();
    last_wait_s = seconds(wait_start, wait_end);
    rescale_for_join();
    write_back(used);
    if (!rebuilt || (options.static_graph() && !graph_known)) after_first_backward(missing, used);
    ++synchronized;
    record_step(compute_end, wait_end);
    autotune_after_step();
    reset_iteration();
  }

  // Puts the averages into the parameters' .grad() (`used`: which parameters some rank used,
  // with find_unused_parameters; else undefined). A gradient that is its place in the bucket
  // already holds its average.
  void write_back(const at::Tensor& used) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      at::Tensor& grad = params[i].mutable_grad();
      if (grad_in_bucket(i)) continue;
      at::Tensor averaged = slot(i).view_as(params[i]);
      if (grad.defined()) {
        if (grad_views.empty()) grad.copy_(averaged);
        else grad = grad_views[i];
      } else if (!used.defined() || used[static_cast<int64_t>(i)].item<int>() > 0) {
        // Unused here but used elsewhere: take the others' average.
        grad = grad_views.empty() ? averaged.clone() : grad_views[i];
      }
    }
  }

  static void record_span(const char* name, Clock::time_point from, Clock::time_point to) {
    timeline::TimelineEvent e;
    e.name = name;
    e.lane = timeline::Lane::kStep;
    e.start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(from.time_since_epoch()).count();
    e.end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(to.time_since_epoch()).count();
    timeline::record(std::move(e));
  }

  static double seconds(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  }

  // StepTimes of the backward that just ended (its computation ended at `compute_end`).
  void record_step(Clock::time_point compute_end, Clock::time_point wait_end) {
    const auto end = Clock::now();
    StepTimes t;
    t.step = synchronized;
    if (forward_timed) {
      t.between_steps = times.step > 0 ? seconds(last_step_end, forward_start) : 0;
      t.forward = seconds(forward_start, forward_end);
      t.backward = seconds(forward_end, compute_end);
    }
    t.communication_wait = seconds(compute_end, wait_end);
    t.write_back = seconds(wait_end, end);
    t.bucket_cap_mb = options.bucket_cap_mb();
    times = t;
    if (timeline::recording()) {  // inside the caller's backward span: what DDP adds at its end
      record_span("DDP wait for buckets", compute_end, wait_end);
      record_span("DDP write back", wait_end, end);
    }
    last_step_end = end;
    forward_timed = false;
  }
};

}  // namespace nn
}  // namespace kindling
