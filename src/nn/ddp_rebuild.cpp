// What DistributedDataParallel learns from its first synchronised backward (src/nn/ddp_state.h):
// the buckets made again in the order gradients become ready, and static_graph's unused
// parameters, and the check that later backwards keep that graph.
#include <c10/util/strides.h>

#include <sstream>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "nn/ddp_buckets.h"
#include "nn/ddp_state.h"

namespace kindling {
namespace nn {

void GradientReducer::State::make_buckets(const std::vector<std::size_t>& order) {
  buckets.clear();
  grad_views.clear();
  bucket_of.assign(params.size(), 0);
  offset_of.assign(params.size(), 0);
  const auto groups = detail::assign_buckets(params, options.bucket_cap_mb(), order);
  for (std::size_t b = 0; b < groups.size(); ++b) {
    Bucket bucket;
    bucket.members = groups[b];
    int64_t numel = 0;
    for (std::size_t i : bucket.members) {
      bucket_of[i] = b;
      offset_of[i] = numel;
      numel += params[i].numel();
    }
    const auto& first = params[bucket.members.front()];
    // In the backend's fastest memory for all-reduce (the mpi backend's shared window).
    bucket.flat = dist::empty_comm_buffer({numel}, first.options().requires_grad(false), options.group()).zero_();
    bucket.pending = bucket.members.size();
    buckets.push_back(std::move(bucket));
  }
  if (!options.gradient_as_bucket_view()) return;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& flat = buckets[bucket_of[i]].flat;
    const at::Tensor& p = params[i];
    grad_views.push_back(at::empty({0}, flat.options()).set_(flat.storage(), flat.storage_offset() + offset_of[i],
                                                               p.sizes(), c10::contiguous_strides(p.sizes())));
  }
}

void GradientReducer::State::rebuild_buckets() {
  // This rank's order: what it saw, then what it did not see in reverse registration order.
  std::vector<char> seen(params.size(), 0);
  std::vector<int64_t> order;
  for (std::size_t i : ready_order) {
    seen[i] = 1;
    order.push_back(static_cast<int64_t>(i));
  }
  for (std::size_t k = params.size(); k-- > 0;) {
    if (!seen[k]) order.push_back(static_cast<int64_t>(k));
  }
  // The ranks must bucket alike: the group's first rank's order for all.
  at::Tensor shared = at::tensor(order, at::TensorOptions().dtype(at::kLong)).to(params[0].device());
  shared = dist::broadcast(shared, src, options.group()).cpu();
  std::vector<std::size_t> chosen(params.size());
  for (std::size_t k = 0; k < chosen.size(); ++k) chosen[k] = static_cast<std::size_t>(shared[k].item<int64_t>());
  const auto groups = detail::assign_buckets(params, options.bucket_cap_mb(), chosen);
  bool same = groups.size() == buckets.size();
  for (std::size_t b = 0; b < groups.size() && same; ++b) same = groups[b] == buckets[b].members;
  if (same) return;
  remake_buckets(chosen);
}

void GradientReducer::State::remake_buckets(const std::vector<std::size_t>& order) {
  // Gradients that live in the old buckets move to their places in the new ones.
  std::vector<at::Tensor> moved(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (grad_in_bucket(i)) moved[i] = params[i].grad();
  }
  make_buckets(order);
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!moved[i].defined()) continue;
    grad_views[i].copy_(moved[i]);
    params[i].mutable_grad() = grad_views[i];
  }
}

void GradientReducer::State::begin_iteration() {
  if (!graph_known) return;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!locally_unused[i]) continue;
    ready[i] = 1;
    slot(i).zero_();
    --buckets[bucket_of[i]].pending;
  }
  launch_in_order();
}

void GradientReducer::State::require_same_graph(const std::vector<std::size_t>& missing) {
  if (!graph_known || (missing.empty() && graph_change.empty())) return;
  std::ostringstream what;
  what << "kindling::nn::DistributedDataParallel: static_graph: this backward's graph is not the first "
          "backward's: ";
  if (!graph_change.empty()) what << "parameter '" << graph_change << "' got a gradient, which it did not then";
  if (!missing.empty()) {
    what << (graph_change.empty() ? "" : "; ") << missing.size() << " parameter(s) got none, which had one then ('"
         << names[missing.front()] << "'" << (missing.size() > 1 ? ", ..." : "") << ")";
  }
  what << ". static_graph promises the same graph in every iteration; construct the model without it "
          "(DdpOptions().static_graph(false), with find_unused_parameters(true) if parameters go unused)";
  // Finish what was started so that this rank's engine is left in a clean state.
  for (std::size_t k = 0; k < next_launch; ++k) buckets[k].wait();
  reset_iteration();
  throw UsageError(what.str());
}

void GradientReducer::State::after_first_backward(const std::vector<std::size_t>& missing, const at::Tensor& used) {
  if (options.static_graph() && !graph_known) {
    locally_unused.assign(params.size(), 0);
    for (std::size_t i : missing) locally_unused[i] = 1;
    global_used = used;
    graph_known = true;
  }
  if (rebuilt) return;
  // As torch's Reducer: not while the set of parameters that take part may change, and not under
  // a communication hook, which may keep state by bucket (PowerSGD's error feedback, saved in
  // checkpoints by bucket).
  if ((options.static_graph() || !options.find_unused_parameters()) && !options.comm_hook()) rebuild_buckets();
  rebuilt = true;
  ready_order.clear();
}

}  // namespace nn
}  // namespace kindling
