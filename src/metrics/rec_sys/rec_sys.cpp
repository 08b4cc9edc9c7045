// HitRate and NDCG (kindling/metrics/rec_sys.h): a float64 sum per cut-off k over the users
// and the user count, summed over ranks at compute.
#include "kindling/metrics/rec_sys.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace kindling {
namespace metrics {

TopKRate::TopKRate(const std::string& metric, std::vector<int64_t> top_k, bool ignore_zero_hits,
                   const std::string& sum_key, OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device), top_k_(std::move(top_k)), ignore_zero_hits_(ignore_zero_hits) {
  KINDLING_CHECK(!top_k_.empty(), "kindling::metrics::", metric, ": top_k must hold at least one cut-off");
  for (int64_t k : top_k_) {
    KINDLING_CHECK(k >= 1, "kindling::metrics::", metric, ": top_k must hold positive cut-offs only, but holds ", k);
  }
  std::sort(top_k_.begin(), top_k_.end());
  register_state(sum_key, &sums_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  TopKRate::reset();
}

void TopKRate::reset() {
  sums_ = at::zeros({static_cast<int64_t>(top_k_.size())}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_examples_ = 0;
}

void TopKRate::update(const Value& output) {
  auto [y_pred, y] = y_pred_and_y(output);
  KINDLING_CHECK(y_pred.sizes() == y.sizes(), "kindling::metrics::", name(),
                 ": y_pred and y must have the same shape, but given ", y_pred.sizes(), " and ", y.sizes());
  KINDLING_CHECK(y_pred.dim() == 2, "kindling::metrics::", name(),
                 ": y_pred and y must have shape (N, items), a row of scores and relevances per user, but given ",
                 y_pred.sizes());
  y_pred = y_pred.detach();
  y = y.detach().to(at::kDouble);
  if (ignore_zero_hits_) {
    const at::Tensor keep = counted(y);
    y_pred = y_pred.index({keep});
    y = y.index({keep});
  }
  if (y.size(0) == 0) return;
  const at::Tensor scores = per_user(y_pred, y);
  sums_ += scores.sum(0).to(device());
  num_examples_ += y.size(0);
}

Value TopKRate::compute() {
  const at::Tensor sums = reduce(sums_);
  const int64_t users = reduce(num_examples_);
  if (users == 0) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() +
                             " must have at least one example before it can be computed");
  }
  return Value((sums / static_cast<double>(users)).cpu());
}

HitRate::HitRate(std::vector<int64_t> top_k, bool ignore_zero_hits, OutputTransform output_transform,
                 c10::Device device)
    : TopKRate("HitRate", std::move(top_k), ignore_zero_hits, "_hits_per_k", std::move(output_transform), device) {}

at::Tensor HitRate::counted(const at::Tensor& y) const { return (y > 0).any(1); }

at::Tensor HitRate::per_user(const at::Tensor& y_pred, const at::Tensor& y) const {
  const int64_t largest = top_k().back();
  KINDLING_CHECK(largest <= y.size(1), "kindling::metrics::HitRate: top_k ", largest,
                 " is larger than the number of items, ", y.size(1));
  const at::Tensor ranked = y.gather(1, std::get<1>(at::topk(y_pred, largest, 1)));
  std::vector<at::Tensor> hits;
  for (int64_t k : top_k()) hits.push_back((ranked.slice(1, 0, k) > 0).any(1).to(at::kDouble));
  return at::stack(hits, 1);
}

NDCG::NDCG(std::vector<int64_t> top_k, bool ignore_zero_hits, double relevance_threshold, Gain gain,
           OutputTransform output_transform, c10::Device device)
    : TopKRate("NDCG", std::move(top_k), ignore_zero_hits, "_sum_ndcg_per_k", std::move(output_transform), device),
      relevance_threshold_(relevance_threshold),
      gain_(gain) {}

at::Tensor NDCG::counted(const at::Tensor& y) const { return (y >= relevance_threshold_).any(1); }

at::Tensor NDCG::dcg(const at::Tensor& ranked) const {
  const int64_t items = ranked.size(1);
  const at::Tensor positions = at::arange(1, items + 1, ranked.options());
  const at::Tensor gains = gain_ == Gain::kExpRank ? at::pow(2.0, ranked) - 1 : ranked;
  const at::Tensor discounted = gains / at::log2(positions + 1);
  std::vector<at::Tensor> out;
  for (int64_t k : top_k()) out.push_back(discounted.slice(1, 0, std::min(k, items)).sum(1));
  return at::stack(out, 1);
}

at::Tensor NDCG::per_user(const at::Tensor& y_pred, const at::Tensor& y) const {
  const at::Tensor relevant = at::where(y >= relevance_threshold_, y, at::zeros_like(y));
  // Ties keep the items' order, for the ranking and for the ideal order.
  const at::Tensor order = std::get<1>(y_pred.sort(/*stable=*/true, 1, /*descending=*/true));
  const at::Tensor ideal = std::get<0>(relevant.sort(/*stable=*/true, 1, /*descending=*/true));
  const at::Tensor achieved = dcg(relevant.gather(1, order)), best = dcg(ideal);
  return at::where(best > 0, achieved / best, at::zeros_like(achieved));
}

}  // namespace metrics
}  // namespace kindling
