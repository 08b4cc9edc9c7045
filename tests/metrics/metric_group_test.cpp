// MetricGroup: members updated together through the group's then their own output_transform,
// each member's value stored under its own name (a tuple as "<name>/<i>") and the whole
// group under the attached name, detach removing them all, the state of every member saved
// and resumed (also from 3 saved ranks into 1), MetricsLambda members (Fbeta, arithmetic,
// mIoU over a member) fed and saved through their sources, and the errors of misuse.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/metrics/metrics.h"
#include "support/errors.h"
#include "support/metrics.h"

namespace {

namespace km = kindling::metrics;
using kindling::engine::Engine;
using kindling::engine::Value;
using kindling::testing::error_of;

// Batch b: 3-class logits, labels, and a score with ties for "label == 1".
Value group_batch(int64_t b) {
  at::Generator gen = at::detail::createCPUGenerator(static_cast<uint64_t>(77 + b));
  const int64_t n = 4 + b % 3;
  return Value::named({{"logits", at::randn({n, 3}, gen)},
                       {"y", at::randint(3, {n}, gen)},
                       {"score", at::floor(at::rand({n}, gen) * 4) / 4}});
}

// The members' own transforms read the group's transformed output {logits, y, score}.
km::MetricGroup::Members group_members() {
  return {
      {"acc", std::make_shared<km::Accuracy>()},
      {"auc", std::make_shared<km::ROC_AUC>([](const Value& o) {
         return Value{o[2], o[1] == 1};
       })},
      {"pr", std::make_shared<km::PrecisionRecallCurve>([](const Value& o) {
         return Value{o[2], o[1] == 1};
       })},
  };
}

Value group_transform(const Value& o) { return Value{o["logits"], o["y"], o["score"]}; }

// A binary problem from the group's output {logits, y, score}: score >= 0.5 against y == 1.
// Its first two tensors differ from the output's, so a source fed without it sees other data.
Value group_binary(const Value& o) { return Value{(o[2] >= 0.5).to(at::kLong), (o[1] == 1).to(at::kLong)}; }

// Members that are MetricsLambdas (Fbeta, arithmetic, mIoU over a member's ConfusionMatrix,
// a lambda reading one accuracy twice), their sources each with its own output_transform.
km::MetricGroup::Members group_lambda_members() {
  auto cm = std::make_shared<km::ConfusionMatrix>(3, std::nullopt, [](const Value& o) { return Value{o[0], o[1]}; });
  std::shared_ptr<km::Metric> twice = std::make_shared<km::Accuracy>(group_binary);
  return {
      {"f1", km::Fbeta(1.0, true, nullptr, nullptr, group_binary)},
      {"shifted", std::make_shared<km::Accuracy>(group_binary) * 2.0 + 1.0},
      {"cm", cm},
      {"miou", km::mIoU(cm)},
      {"ratio", twice / (twice + 1.0)},
  };
}

bool group_same(const Value& a, const Value& b) {
  const at::Tensor x = a.tensor().to(at::kDouble), y = b.tensor().to(at::kDouble);
  return x.sizes() == y.sizes() && at::allclose(x, y, 0, 1e-15);
}

}  // namespace

TEST(MetricGroupTest, MembersUpdateTogetherAndAppearUnderTheirNames) {
  Engine evaluator([](Engine&, const Value& batch) { return batch; });
  auto group = std::make_shared<km::MetricGroup>(group_members(), group_transform);
  group->attach(evaluator, "eval");
  std::vector<Value> data{group_batch(0), group_batch(1), group_batch(2)};
  evaluator.run(data, 1);

  // Each member alone, through the same two transforms, gives the value stored under its name.
  const km::MetricGroup::Members alone = group_members();
  for (const Value& batch : data) {
    for (const auto& [name, m] : alone)
      m->update(m->output_transform() ? m->output_transform()(group_transform(batch)) : group_transform(batch));
  }
  const auto& metrics = evaluator.state().metrics;
  EXPECT_TRUE(metrics.at("acc").is_number());
  EXPECT_DOUBLE_EQ(metrics.at("acc").number(), alone[0].second->compute().number());
  EXPECT_DOUBLE_EQ(metrics.at("auc").number(), alone[1].second->compute().number());
  const Value curve = alone[2].second->compute();
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(group_same(metrics.at("pr/" + std::to_string(i)), curve[i])) << "pr/" << i;
  }
  // The whole group, as named tensors (a number as a 0-dim tensor).
  const Value& whole = metrics.at("eval");
  ASSERT_TRUE(whole.is_named());
  EXPECT_EQ(whole.size(), 5u);  // acc, auc, pr/0, pr/1, pr/2
  EXPECT_EQ(whole["acc"].dim(), 0);
  EXPECT_DOUBLE_EQ(whole["auc"].item<double>(), metrics.at("auc").number());
  EXPECT_EQ(group->metrics().size(), 3u);

  group->detach(evaluator);
  for (const char* name : {"eval", "acc", "auc", "pr/0", "pr/2"}) EXPECT_EQ(metrics.count(name), 0u) << name;
}

TEST(MetricGroupTest, StateCoversEveryMemberAndReshardsFromThreeRanks) {
  // Saved mid-way and resumed: the value over all batches.
  km::MetricGroup saved(group_members(), group_transform), resumed(group_members(), group_transform),
      whole(group_members(), group_transform);
  for (int64_t b = 0; b < 2; ++b) {
    saved.update(group_transform(group_batch(b)));
    whole.update(group_transform(group_batch(b)));
  }
  const kindling::StateDict state = saved.state_dict();
  const auto rank0 = state.at("__metric_state_per_rank").toList().get(0).toGenericDict();  // ignite's layout
  for (const char* key : {"acc/_num_correct", "acc/_num_examples", "auc/_predictions", "pr/_targets"}) {
    EXPECT_TRUE(rank0.contains(key)) << key;
  }
  resumed.load_state_dict(state);
  resumed.update(group_transform(group_batch(2)));
  whole.update(group_transform(group_batch(2)));
  const Value a = resumed.compute(), b = whole.compute();
  for (const auto& kv : b.named_elements()) EXPECT_TRUE(group_same(a[kv.first], kv.second)) << kv.first;

  // Saved by 3 ranks (the middle one saw nothing), loaded by 1: the value over their union.
  std::vector<std::shared_ptr<km::Metric>> ranks;
  auto uni = std::make_shared<km::MetricGroup>(group_members(), group_transform);
  for (int64_t r = 0; r < 3; ++r) {
    ranks.push_back(std::make_shared<km::MetricGroup>(group_members(), group_transform));
    for (int64_t b = 0; r != 1 && b < 2; ++b) {
      ranks.back()->update(group_transform(group_batch(10 * r + b)));
      uni->update(group_transform(group_batch(10 * r + b)));
    }
  }
  km::MetricGroup one(group_members(), group_transform);
  one.load_state_dict(kindling::testing::join_rank_states(ranks));
  const Value got = one.compute(), want = uni->compute();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& kv : want.named_elements()) EXPECT_TRUE(group_same(got[kv.first], kv.second)) << kv.first;
}

TEST(MetricGroupTest, MisuseIsRefusedWithTheReason) {
  auto acc = std::make_shared<km::Accuracy>();
  EXPECT_NE(error_of([&] { km::MetricGroup({{"", acc}}); }).find("a member has an empty name"), std::string::npos);
  EXPECT_NE(error_of([&] {
              km::MetricGroup({{"a", nullptr}});
            }).find("the member 'a' is a null pointer"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              km::MetricGroup({{"a", acc}, {"a", std::make_shared<km::Accuracy>()}});
            }).find("the name 'a' is given to two members"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              km::MetricGroup({{"a", acc}, {"b", acc}});
            }).find("the members 'a' and 'b' are the same Accuracy object, which would update twice per batch"),
            std::string::npos);

  Engine evaluator([](Engine&, const Value& batch) { return batch; });
  auto group = std::make_shared<km::MetricGroup>(km::MetricGroup::Members{{"acc", acc}});
  EXPECT_NE(error_of<kindling::UsageError>([&] {
              group->attach(evaluator, "acc");
            }).find("the name 'acc' is also a member's name"),
            std::string::npos);

  // Any metric with a named value: its entries take their own keys, so not its own name.
  auto named = std::make_shared<km::EpochMetric>([](const at::Tensor& p, const at::Tensor&) {
    return Value::named({{"sum", p.sum()}, {"max", p.max()}});
  });
  named->attach(evaluator, "max");
  std::vector<Value> data{Value{at::ones({2}), at::zeros({2})}};
  EXPECT_NE(error_of([&] {
              evaluator.run(data, 1);
            }).find("the name 'max' it is attached under is also a key of its named value (max, sum)"),
            std::string::npos);
}

// A MetricsLambda member is updated through its sources, each through its own
// output_transform and once per batch (also a source shared with another member), and its
// sources' state is saved, resumed and resharded with the group.
TEST(MetricGroupTest, LambdaMembersAreFedAndCheckpointedThroughTheirSources) {
  std::vector<Value> data;
  for (int64_t b = 0; b < 5; ++b) data.push_back(group_batch(b));

  // The reference: the same metrics attached on their own (each source once, transformed).
  Engine alone_engine([](Engine&, const Value& batch) { return group_transform(batch); });
  for (const auto& [name, m] : group_lambda_members()) m->attach(alone_engine, name);
  alone_engine.run(data, 1);
  const auto& want = alone_engine.state().metrics;

  Engine evaluator([](Engine&, const Value& batch) { return batch; });
  auto group = std::make_shared<km::MetricGroup>(group_lambda_members(), group_transform);
  group->attach(evaluator, "eval");
  evaluator.run(data, 1);
  const auto& got = evaluator.state().metrics;
  for (const char* name : {"f1", "shifted", "miou", "ratio"}) {
    ASSERT_TRUE(got.at(name).is_number()) << name;
    EXPECT_DOUBLE_EQ(got.at(name).number(), want.at(name).number()) << name;
  }
  EXPECT_TRUE(group_same(got.at("cm"), want.at("cm"))) << "the shared ConfusionMatrix counts each sample once";

  // The sources' state under "<member>/args/<i>/...", a source read twice saved once.
  km::MetricGroup saved(group_lambda_members(), group_transform), resumed(group_lambda_members(), group_transform),
      whole(group_lambda_members(), group_transform);
  for (int64_t b = 0; b < 3; ++b) {
    saved.update(group_transform(data[b]));
    whole.update(group_transform(data[b]));
  }
  const kindling::StateDict state = saved.state_dict();
  const auto rank0 = state.at("__metric_state_per_rank").toList().get(0).toGenericDict();  // ignite's layout
  for (const char* key : {"f1/args/0/_numerator", "f1/args/1/_denominator", "shifted/args/0/args/0/_num_correct",
                          "miou/args/0/args/0/confusion_matrix", "ratio/args/0/_num_examples"}) {
    EXPECT_TRUE(rank0.contains(key)) << key;
  }
  EXPECT_FALSE(rank0.contains("ratio/args/1/args/0/_num_examples")) << "saved at its first place only";
  int64_t samples = 0;
  for (int64_t b = 0; b < 3; ++b) samples += data[b]["y"].size(0);
  EXPECT_EQ(rank0.at("ratio/args/0/_num_examples").toInt(), samples) << "updated once per batch";
  resumed.load_state_dict(state);
  for (int64_t b = 3; b < 5; ++b) {
    resumed.update(group_transform(data[b]));
    whole.update(group_transform(data[b]));
  }
  const Value a = resumed.compute(), b = whole.compute();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& kv : b.named_elements()) EXPECT_TRUE(group_same(a[kv.first], kv.second)) << kv.first;
  EXPECT_DOUBLE_EQ(b["f1"].item<double>(), want.at("f1").number());

  // Saved by 2 ranks, loaded by 1: the value over their union.
  std::vector<std::shared_ptr<km::Metric>> ranks;
  for (int64_t r = 0; r < 2; ++r) {
    ranks.push_back(std::make_shared<km::MetricGroup>(group_lambda_members(), group_transform));
    for (int64_t i = r; i < 5; i += 2) ranks.back()->update(group_transform(data[i]));
  }
  km::MetricGroup one(group_lambda_members(), group_transform);
  one.load_state_dict(kindling::testing::join_rank_states(ranks));
  const Value joined = one.compute();
  for (const auto& kv : b.named_elements()) EXPECT_TRUE(group_same(joined[kv.first], kv.second)) << kv.first;
}
