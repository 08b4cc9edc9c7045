// What DistributedDataParallel learns from its first synchronised backward (src/nn/ddp/ddp_state.h,
// its record in src/nn/ddp/ddp_rebuild_state.h): the buckets made again in the order gradients
// become ready, and static_graph's unused parameters, and the check that later backwards keep
// that graph.
#include <sstream>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "nn/ddp/ddp_buckets.h"
#include "nn/ddp/ddp_state.h"

namespace kindling {
namespace nn {

void GradientReducer::State::rebuild_buckets() {
  // This rank's order: what it saw, then what it did not see in reverse registration order.
  const std::vector<int64_t> order = rebuild_.local_order(params_.size());
  // The ranks must bucket alike: the group's first rank's order for all.
  at::Tensor shared = at::tensor(order, at::TensorOptions().dtype(at::kLong)).to(params_[0].device());
  shared = dist::broadcast(shared, src_, options_.group()).cpu();
  std::vector<std::size_t> chosen(params_.size());
  for (std::size_t k = 0; k < chosen.size(); ++k) chosen[k] = static_cast<std::size_t>(shared[k].item<int64_t>());
  const auto groups = detail::assign_buckets(params_, options_.bucket_cap_mb(), chosen);
  if (buckets_.same_as(groups)) return;
  remake_buckets(chosen);
}

void GradientReducer::State::remake_buckets(const std::vector<std::size_t>& order) {
  buckets_.remake(order, options_.bucket_cap_mb(), options_.gradient_as_bucket_view(), options_.group());
}

void GradientReducer::State::begin_iteration() {
  if (!rebuild_.graph_known()) return;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!rebuild_.locally_unused(i)) continue;
    buckets_.set_ready(i);
    buckets_.count_zero(i);
  }
  launch_in_order();
}

void GradientReducer::State::require_same_graph(const std::vector<std::size_t>& missing) {
  const std::string& change = rebuild_.graph_change();
  if (!rebuild_.graph_known() || (missing.empty() && change.empty())) return;
  std::ostringstream what;
  what << "kindling::nn::DistributedDataParallel: static_graph: this backward's graph is not the first "
          "backward's: ";
  if (!change.empty()) what << "parameter '" << change << "' got a gradient, which it did not then";
  if (!missing.empty()) {
    what << (change.empty() ? "" : "; ") << missing.size() << " parameter(s) got none, which had one then ('"
         << names_[missing.front()] << "'" << (missing.size() > 1 ? ", ..." : "") << ")";
  }
  what << ". static_graph promises the same graph in every iteration; construct the model without it "
          "(DdpOptions().static_graph(false), with find_unused_parameters(true) if parameters go unused)";
  // Finish what was started so that this rank's engine is left in a clean state.
  buckets_.wait_launched();
  reset_iteration();
  throw UsageError(what.str());
}

void GradientReducer::State::after_first_backward(const std::vector<std::size_t>& missing, const at::Tensor& used) {
  if (options_.static_graph() && !rebuild_.graph_known()) rebuild_.learn_graph(params_.size(), missing, used);
  if (rebuild_.rebuilt()) return;
  // As torch's Reducer: not while the set of parameters that take part may change, and not under
  // a communication hook, which may keep state by bucket (PowerSGD's error feedback, saved in
  // checkpoints by bucket).
  if ((options_.static_graph() || !options_.find_unused_parameters()) && !options_.comm_hook()) rebuild_buckets();
  rebuild_.finish();
}

}  // namespace nn
}  // namespace kindling
