#pragma once
/// \file
/// Ranking quality of recommendations at several cut-offs k (ignite.metrics.rec_sys): HitRate
/// and NDCG. Input (y_pred, y) of the same shape (N, items): y_pred the scores, y the
/// relevance of each item (HitRate: an item is a hit when its y > 0). The value is one number
/// per k, in increasing order of k, as a float64 tensor: sums over users and the user count,
/// summed over ranks.
///
/// \code
///   auto ndcg = std::make_shared<kindling::metrics::NDCG>(std::vector<int64_t>{5, 10});
///   ndcg->attach(evaluator, "ndcg");   // state().metrics["ndcg"]: [NDCG@5, NDCG@10]
/// \endcode
///
/// Ranks: update() is local; compute() is a collective (every rank calls it, in the same
/// order). Checkpointed and resharded to another world size by sums (Reshard::kSum).

#include <string>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// What the two share: the cut-offs, a float64 sum per k over the users and the user count.
class KINDLING_API TopKRate : public Metric {
 public:
  void reset() override;
  /// Throws kindling::UsageError naming the metric when y_pred and y differ in shape or are
  /// not (N, items); stores nothing then. Users that ignore_zero_hits leaves out are not counted.
  void update(const Value& output) override;
  /// One mean per k over every rank's users (a collective). Throws NotComputableError when no
  /// rank counted a user.
  Value compute() override;
  /// The cut-offs, sorted.
  const std::vector<int64_t>& top_k() const { return top_k_; }

 protected:
  /// `sum_key`: the state-dict name of the per-k sums (ignite's). Throws kindling::UsageError
  /// naming the metric when `top_k` is empty or holds a k below 1.
  TopKRate(const std::string& metric, std::vector<int64_t> top_k, bool ignore_zero_hits, const std::string& sum_key,
           OutputTransform output_transform, c10::Device device);
  /// Which users count: those with a relevant item where ignore_zero_hits, else all ((N,) bool).
  virtual at::Tensor counted(const at::Tensor& y) const = 0;
  /// Each counted user's score at each k, (users, K) float64, from their scores and relevances.
  virtual at::Tensor per_user(const at::Tensor& y_pred, const at::Tensor& y) const = 0;

 private:
  std::vector<int64_t> top_k_;
  bool ignore_zero_hits_;
  at::Tensor sums_;  // float64, (K,)
  int64_t num_examples_ = 0;
};

/// The share of users with a relevant item (y > 0) among their top k scored items, per k.
class KINDLING_API HitRate : public TopKRate {
 public:
  /// `top_k`: the cut-offs (each at least 1 and at most the number of items); `ignore_zero_hits`:
  /// users without any relevant item are left out. Throws kindling::UsageError for a bad top_k.
  explicit HitRate(std::vector<int64_t> top_k = {1}, bool ignore_zero_hits = true,
                   OutputTransform output_transform = {}, c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "HitRate"; }

 protected:
  at::Tensor counted(const at::Tensor& y) const override;
  /// Throws kindling::UsageError when the largest k exceeds the number of items.
  at::Tensor per_user(const at::Tensor& y_pred, const at::Tensor& y) const override;
};

/// Normalized discounted cumulative gain at k: DCG of the items in score order (ties in their
/// given order) over DCG of the ideal order, gains 2^rel - 1 (exp_rank) or rel (linear_rank),
/// relevances below `relevance_threshold` counted as 0; 0 for a user with no gain.
class KINDLING_API NDCG : public TopKRate {
 public:
  enum class Gain { kExpRank, kLinearRank };
  /// `ignore_zero_hits`: users without an item at or above the threshold are left out.
  /// Throws kindling::UsageError for an empty top_k or a k below 1.
  explicit NDCG(std::vector<int64_t> top_k, bool ignore_zero_hits = true, double relevance_threshold = 1.0,
                Gain gain = Gain::kExpRank, OutputTransform output_transform = {},
                c10::Device device = c10::Device(c10::kCPU));
  std::string name() const override { return "NDCG"; }

 protected:
  at::Tensor counted(const at::Tensor& y) const override;
  at::Tensor per_user(const at::Tensor& y_pred, const at::Tensor& y) const override;

 private:
  /// DCG at each k of relevances already in rank order ((users, items) -> (users, K)).
  at::Tensor dcg(const at::Tensor& ranked) const;
  double relevance_threshold_;
  Gain gain_;
};

}  // namespace metrics
}  // namespace kindling
