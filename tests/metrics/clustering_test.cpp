// SilhouetteScore, CalinskiHarabaszScore, DaviesBouldinScore (kindling/metrics/clustering.h)
// and HitRate, NDCG (rec_sys.h): equal to the real ignite 0.5.5 (and the scikit-learn 1.9.1 its
// clustering metrics call) on the same batches (tests/metrics/ignite_cases.py, where the build's
// Python has them: the LibTorch 2.15 venv), to values worked by hand, and they refuse misuse
// with what they were given. Across ranks (1, 2 and 3 with an empty shard, gloo and mpi):
// distributed_metrics_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/clustering.h"
#include "kindling/metrics/rec_sys.h"
#include "metrics/ignite_cases.h"
#include "support/errors.h"

namespace km = kindling::metrics;
using kindling::engine::Value;
using kindling::testing::error_of;

namespace clustering_test {

using kindling::testing::batches_of;
using kindling::testing::IgniteCase;
using Batch = kindling::testing::MetricBatch;

std::vector<IgniteCase> clustering_cases() {
  // Three blobs labelled 2, 5 and 9 (not 0..K-1), overlapping a little.
  const auto blobs = batches_of(41, [](at::Generator& g, int64_t n) {
    const at::Tensor which = at::randint(0, 3, {n}, g);
    const at::Tensor centers = at::tensor({0.0f, 0.0f, 3.0f, 0.0f, 0.0f, 2.5f}).reshape({3, 2});
    return Batch{centers.index({which}) + at::randn({n, 2}, g), at::tensor({2L, 5L, 9L}).index({which})};
  });
  // One sample labelled 7, alone in its cluster (its silhouette is 0).
  auto lonely = blobs;
  lonely[2].second = lonely[2].second.clone();
  lonely[2].second[0] = 7;
  std::vector<IgniteCase> out;
  for (const auto& [suffix, batches] : {std::pair<std::string, std::vector<Batch>>{"", blobs}, {"_lonely", lonely}}) {
    out.push_back({"silhouette" + suffix, "clustering.SilhouetteScore", "{}", batches,
                   [] { return std::make_shared<km::SilhouetteScore>(); }});
    out.push_back({"calinski_harabasz" + suffix, "clustering.CalinskiHarabaszScore", "{}", batches,
                   [] { return std::make_shared<km::CalinskiHarabaszScore>(); }});
    out.push_back({"davies_bouldin" + suffix, "clustering.DaviesBouldinScore", "{}", batches,
                   [] { return std::make_shared<km::DaviesBouldinScore>(); }});
  }
  return out;
}

std::vector<IgniteCase> rec_sys_cases() {
  // Scores for 6 items; relevances 0 to 3, some users with none (left out by ignore_zero_hits).
  const auto ratings = batches_of(42, [](at::Generator& g, int64_t n) {
    const at::Tensor relevance = at::randint(0, 4, {n, 6}, g) * (at::rand({n, 6}, g) > 0.6);
    return Batch{at::randn({n, 6}, g) + 0.5 * relevance, relevance.to(at::kFloat)};
  });
  using km::NDCG;
  return {
      {"hit_rate", "HitRate", R"({"top_k": [1, 3, 5]})", ratings,
       [] {
         return std::make_shared<km::HitRate>(std::vector<int64_t>{5, 1, 3});
       }},
      {"hit_rate_all_users", "HitRate", R"({"top_k": 2, "ignore_zero_hits": false})", ratings,
       [] { return std::make_shared<km::HitRate>(std::vector<int64_t>{2}, false); }},
      {"ndcg", "NDCG", R"({"top_k": [1, 3, 6, 10]})", ratings,
       [] {
         return std::make_shared<NDCG>(std::vector<int64_t>{1, 3, 6, 10});
       }},
      {"ndcg_linear", "NDCG",
       R"({"top_k": [2, 4], "ignore_zero_hits": false, "relevance_threshold": 2.0, "gain_function": "linear_rank"})",
       ratings,
       [] {
         return std::make_shared<NDCG>(std::vector<int64_t>{2, 4}, false, 2.0, NDCG::Gain::kLinearRank);
       }},
  };
}

TEST(ClusteringTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(clustering_cases()); }

TEST(RecSysTest, EqualIgnite055OnTheSameBatches) { kindling::testing::expect_ignite_values(rec_sys_cases()); }

TEST(ClusteringTest, ValuesWorkedByHand) {
  // Clusters {0, 1} and {10, 11} on a line: centroids 0.5 and 10.5.
  const at::Tensor x = at::tensor({0.0, 1.0, 10.0, 11.0}).reshape({4, 1});
  const at::Tensor labels = at::tensor({0L, 0L, 1L, 1L});
  // a = 1 for every point; b = 10.5 for the outer two, 9.5 for the inner two.
  EXPECT_NEAR(km::silhouette_score(x, labels), (9.5 / 10.5 + 8.5 / 9.5) / 2, 1e-12);
  // Between: 2 * 5^2 * 2 = 100 over K - 1 = 1; within: 4 * 0.5^2 = 1 over N - K = 2.
  EXPECT_NEAR(km::calinski_harabasz_score(x, labels), 200.0, 1e-9);
  // Spreads 0.5 and 0.5, centroids 10 apart.
  EXPECT_NEAR(km::davies_bouldin_score(x, labels), 0.1, 1e-12);
  // One cluster, or as many clusters as samples: NaN, as ignite.
  EXPECT_TRUE(std::isnan(km::silhouette_score(x, at::zeros({4}, at::kLong))));
  EXPECT_TRUE(std::isnan(km::davies_bouldin_score(x, at::arange(4))));
}

TEST(RecSysTest, ValuesWorkedByHand) {
  // Item 1 is the one relevant item and scores lowest: a hit only in the top 3.
  km::HitRate hits({1, 2, 3});
  hits.update(Value::tuple({at::tensor({0.9, 0.1, 0.5}).reshape({1, 3}), at::tensor({0.0, 1.0, 0.0}).reshape({1, 3})}));
  EXPECT_TRUE(at::equal(hits.compute().tensor(), at::tensor({0.0, 0.0, 1.0}, at::kDouble)));
  // Linear gains: ranked relevances 2, 0, 3 -> DCG@3 = 2 + 0 + 3 / 2; ideal 3, 2, 0 -> 3 + 2 / log2(3).
  km::NDCG ndcg({3}, true, 1.0, km::NDCG::Gain::kLinearRank);
  ndcg.update(Value::tuple({at::tensor({0.1, 0.9, 0.5}).reshape({1, 3}), at::tensor({3.0, 2.0, 0.0}).reshape({1, 3})}));
  EXPECT_NEAR(ndcg.compute().tensor()[0].item<double>(), 3.5 / (3 + 2 / std::log2(3.0)), 1e-12);
}

TEST(ClusteringTest, MisuseIsRefusedWithWhatWasGiven) {
  km::SilhouetteScore silhouette;
  EXPECT_NE(error_of([&] {
              silhouette.update(Value::tuple({at::ones({4, 2}), at::ones({4})}));
            }).find("SilhouetteScore: labels must be integers of shape (N,), but given Float [4]"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] {
        silhouette.update(Value::tuple({at::ones({4, 2, 2}), at::ones({4}, at::kLong)}));
      })
          .find("SilhouetteScore: predictions should be of shape (batch_size, n_targets) or (batch_size, ), but given "
                "[4, 2, 2]"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              silhouette.update(Value::tuple({at::ones({4, 2}, at::kLong), at::ones({4}, at::kLong)}));
            }).find("SilhouetteScore: features must be floating point of shape (N, D), but given Long [4, 2]"),
            std::string::npos);
  EXPECT_NE(error_of<km::NotComputableError>([&] { silhouette.compute(); }).find("at least one"), std::string::npos);
  EXPECT_NE(error_of([] {
              km::calinski_harabasz_score(at::ones({3, 2}), at::zeros({4}, at::kLong));
            }).find("features and labels must have as many rows, but given [3, 2] and [4]"),
            std::string::npos);
}

// scikit-learn 1.9.1 (which ignite's clustering metrics call) raises ValueError for NaN or inf
// features ("Input X contains NaN", "... infinity"): kindling refuses them too, naming the row.
TEST(ClusteringTest, NonFiniteFeaturesAreRefusedAsScikitLearnDoes) {
  const at::Tensor labels = at::tensor({0, 0, 1, 1, 1}, at::kLong);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    const at::Tensor x = at::tensor({0.0, 1.0, 1.0, 1.0, bad, 2.0, 3.0, 3.0, 4.0, 4.0}).reshape({5, 2});
    for (auto score : {&km::silhouette_score, &km::calinski_harabasz_score, &km::davies_bouldin_score}) {
      EXPECT_NE(error_of<kindling::UsageError>([&] {
                  score(x, labels);
                }).find("features must be finite, but row 2 of 5 holds NaN or inf"),
                std::string::npos)
          << bad;
    }
    km::DaviesBouldinScore metric;
    metric.update(Value::tuple({x, labels}));
    EXPECT_NE(error_of<kindling::UsageError>([&] { metric.compute(); }).find("davies_bouldin_score: features must be"),
              std::string::npos);
  }
}

TEST(RecSysTest, MisuseIsRefusedWithWhatWasGiven) {
  EXPECT_NE(error_of([] {
              km::HitRate bad({2, 0});
            }).find("HitRate: top_k must hold positive cut-offs only, but holds 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { km::NDCG bad({}); }).find("NDCG: top_k must hold at least one cut-off"), std::string::npos);
  km::HitRate hits({4});
  EXPECT_NE(error_of([&] {
              hits.update(Value::tuple({at::ones({2, 3}), at::ones({2, 3})}));
            }).find("HitRate: top_k 4 is larger than the number of items, 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              hits.update(Value::tuple({at::ones({2, 3}), at::ones({2, 4})}));
            }).find("y_pred and y must have the same shape, but given [2, 3] and [2, 4]"),
            std::string::npos);
  EXPECT_NE(error_of<km::NotComputableError>([&] { hits.compute(); }).find("HitRate must have at least one example"),
            std::string::npos);
}

}  // namespace clustering_test
