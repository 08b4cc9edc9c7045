// Metrics in one process: values against hand-computed ones, ignite's errors, and the
// attach usages (which events reset, update and compute).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/errors.h"
#include "kindling/engine/engine.h"
#include "kindling/metrics/metrics.h"

namespace {

namespace km = kindling::metrics;
using kindling::UsageError;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

at::Tensor longs(std::vector<int64_t> v) { return at::tensor(v, at::kLong); }

// logits whose argmax is `classes` (4 classes).
at::Tensor logits_for(const std::vector<int64_t>& classes) {
  at::Tensor out = at::zeros({static_cast<int64_t>(classes.size()), 4});
  for (std::size_t i = 0; i < classes.size(); ++i) out[static_cast<int64_t>(i)][classes[i]] = 1.0;
  return out;
}

using kindling::testing::error_of;

TEST(AccuracyTest, MulticlassBinaryMultilabel) {
  km::Accuracy acc;
  acc.update({logits_for({0, 1, 2, 3}), longs({0, 1, 0, 0})});
  acc.update({logits_for({2, 2}), longs({2, 1})});
  EXPECT_DOUBLE_EQ(acc.compute().number(), 3.0 / 6.0);

  km::Accuracy binary;
  binary.update({longs({1, 0, 1, 1}), longs({1, 1, 1, 0})});
  EXPECT_DOUBLE_EQ(binary.compute().number(), 0.5);

  km::Accuracy multilabel({}, /*is_multilabel=*/true);
  multilabel.update(
      {at::tensor({1, 0, 1, 0, 0, 1}, at::kLong).view({2, 3}), at::tensor({1, 0, 1, 0, 1, 1}, at::kLong).view({2, 3})});
  EXPECT_DOUBLE_EQ(multilabel.compute().number(), 0.5);  // a sample counts only when all its labels match
}

TEST(AccuracyTest, ErrorsAsIgnite) {
  km::Accuracy acc;
  EXPECT_NE(error_of([&] { acc.compute(); }).find("Accuracy must have at least one example before it can be computed"),
            std::string::npos);
  EXPECT_THROW(acc.compute(), km::NotComputableError);
  EXPECT_NE(error_of([&] {
              acc.update({at::zeros({4, 3, 2, 2}), longs({0, 1, 2, 0})});
            }).find("y must have shape of"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              acc.update({at::full({2}, 0.5), longs({0, 1})});
            }).find("comprised of 0's and 1's"),
            std::string::npos);
  acc.update({logits_for({0, 1}), longs({0, 1})});
  EXPECT_NE(error_of([&] {
              acc.update({longs({1, 0}), longs({0, 1})});
            }).find("input data type has changed from multiclass to binary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { acc.update(Value(1.5)); }).find("should be the tuple {y_pred, y}"), std::string::npos);
  acc.reset();  // the type is inferred again after a reset
  acc.update({longs({1, 0}), longs({0, 0})});
  EXPECT_DOUBLE_EQ(acc.compute().number(), 0.5);
}

TEST(LossTest, WeightsEachBatchMeanBySize) {
  km::Loss loss([](const at::Tensor& p, const at::Tensor& y) { return (p - y).abs().mean(); });
  loss.update({at::tensor({1.0, 2.0, 3.0}), at::tensor({0.0, 0.0, 0.0})});  // mean 2 over 3
  loss.update({at::tensor({10.0}), at::tensor({0.0})});                     // mean 10 over 1
  EXPECT_DOUBLE_EQ(loss.compute().number(), (2.0 * 3 + 10.0) / 4);
  km::Loss not_mean([](const at::Tensor& p, const at::Tensor& y) { return (p - y).abs(); });
  EXPECT_NE(error_of([&] {
              not_mean.update({at::ones({2}), at::zeros({2})});
            }).find("loss_fn did not return the average loss"),
            std::string::npos);
  EXPECT_THROW(km::Loss(km::Loss::LossFunction()), UsageError);
}

// A loss function that LibTorch refuses (batch sizes 3 and 2): the error names Loss and both
// shapes, without LibTorch's stack trace (it was LibTorch's raw error); nothing is stored.
TEST(LossTest, ALibTorchErrorOfTheLossFunctionNamesLossAndTheShapes) {
  km::Loss loss([](const at::Tensor& p, const at::Tensor& y) { return at::cross_entropy_loss(p, y); });
  loss.update({at::zeros({2, 3}), longs({0, 1})});
  const std::string error = error_of<UsageError>([&] { loss.update({at::zeros({3, 3}), longs({0, 1})}); });
  EXPECT_NE(error.find("kindling::metrics::Loss: loss_fn failed on y_pred of shape [3, 3] and y of shape [2]"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("Expected input batch_size (3) to match target batch_size (2)"), std::string::npos) << error;
  EXPECT_EQ(error.find("Exception raised from"), std::string::npos) << error;
  EXPECT_NEAR(loss.compute().number(), std::log(3.0), 1e-6);
}

TEST(AverageTest, NumbersAndVectors) {
  km::Average avg;
  avg.update(Value(1.0));
  avg.update(Value(4.0));
  EXPECT_DOUBLE_EQ(avg.compute().number(), 2.5);
  km::Average rows;
  rows.update(Value(at::tensor({1.0, 2.0, 3.0, 4.0}).view({2, 2})));  // two samples of 2 values
  at::Tensor mean = rows.compute().tensor();
  EXPECT_TRUE(at::allclose(mean, at::tensor({2.0, 3.0}, at::kDouble)));
  km::Average empty;
  EXPECT_THROW(empty.compute(), km::NotComputableError);
}

TEST(PrecisionRecallTest, MulticlassAveragesByHand) {
  // y_pred classes 0 1 1 2 2 2, y 0 1 2 2 2 0: per class TP 1,1,2; predicted 1,2,3; actual 2,1,3.
  const Value out{logits_for({0, 1, 1, 2, 2, 2}), longs({0, 1, 2, 2, 2, 0})};
  using PR = km::PrecisionRecallBase;
  km::Precision p_none({}, PR::Average::kFalse), p_macro({}, PR::Average::kMacro), p_micro({}, PR::Average::kMicro),
      p_weighted({}, PR::Average::kWeighted);
  km::Recall r_macro({}, PR::Average::kMacro);
  for (km::Metric* m : std::vector<km::Metric*>{&p_none, &p_macro, &p_micro, &p_weighted, &r_macro}) m->update(out);
  at::Tensor per_class = p_none.compute().tensor().to(at::kDouble);
  EXPECT_TRUE(at::allclose(per_class, at::tensor({1.0, 0.5, 2.0 / 3, 0.0}, at::kDouble))) << per_class;
  EXPECT_NEAR(p_macro.compute().number(), (1.0 + 0.5 + 2.0 / 3 + 0.0) / 4, 1e-12);
  EXPECT_NEAR(p_micro.compute().number(), 4.0 / 6, 1e-12);
  EXPECT_NEAR(p_weighted.compute().number(), (1.0 * 2 + 0.5 * 1 + 2.0 / 3 * 3) / 6, 1e-12);
  EXPECT_NEAR(r_macro.compute().number(), (0.5 + 1.0 + 2.0 / 3 + 0.0) / 4, 1e-12);
  km::Precision nothing;
  EXPECT_THROW(nothing.compute(), km::NotComputableError);
}

TEST(ConfusionMatrixTest, RowsAreTargetsAndIoU) {
  auto cm = std::make_shared<km::ConfusionMatrix>(4);
  cm->update({logits_for({0, 1, 1, 2, 2, 2}), longs({0, 1, 2, 2, 2, 0})});
  at::Tensor m = cm->compute().tensor();
  at::Tensor expected = at::zeros({4, 4}, at::kLong);
  expected[0][0] = 1;
  expected[0][2] = 1;
  expected[1][1] = 1;
  expected[2][1] = 1;
  expected[2][2] = 2;
  EXPECT_TRUE(at::equal(m.to(at::kLong), expected)) << m;
  // IoU per class: TP / (TP + FP + FN): class 0 1/2, class 1 1/2, class 2 2/4, class 3 0/0 -> 0.
  at::Tensor iou = km::IoU(cm)->compute().tensor().to(at::kDouble);
  EXPECT_TRUE(at::allclose(iou.narrow(0, 0, 3), at::tensor({0.5, 0.5, 0.5}, at::kDouble))) << iou;
  EXPECT_THROW(km::ConfusionMatrix(1), UsageError);
}

TEST(RegressionTest, MseMaeRmse) {
  const Value out{at::tensor({1.0, 2.0, 4.0}), at::tensor({1.0, 0.0, 1.0})};
  km::MeanSquaredError mse;
  km::MeanAbsoluteError mae;
  km::RootMeanSquaredError rmse;
  for (km::Metric* m : std::vector<km::Metric*>{&mse, &mae, &rmse}) m->update(out);
  EXPECT_NEAR(mse.compute().number(), 13.0 / 3, 1e-12);
  EXPECT_NEAR(mae.compute().number(), 5.0 / 3, 1e-12);
  EXPECT_NEAR(rmse.compute().number(), std::sqrt(13.0 / 3), 1e-12);
}

TEST(MetricsLambdaTest, ArithmeticOfMetricsFollowsItsSources) {
  auto acc = std::make_shared<km::Accuracy>();
  auto doubled = acc * 2.0 + 1.0;
  Engine engine([](Engine&, const Value& b) { return b; });
  doubled->attach(engine, "doubled");
  std::vector<Value> data{{logits_for({0, 1}), longs({0, 0})}, {logits_for({2, 2}), longs({2, 2})}};
  engine.run(data, 1);
  EXPECT_DOUBLE_EQ(engine.state().metrics.at("doubled").number(), 0.75 * 2 + 1);
  EXPECT_EQ(engine.state().metrics.count("accuracy"), 0u);  // sources are updated, not stored
}

// By hand, as with ignite's MetricsLambda.update: a lambda not attached to an engine passes
// the output to its sources (here through nested lambdas), e.g. F1 from precision and recall.
TEST(MetricsLambdaTest, UpdateByHandFeedsItsSources) {
  std::shared_ptr<km::Metric> precision = std::make_shared<km::Precision>();
  std::shared_ptr<km::Metric> recall = std::make_shared<km::Recall>();
  auto f1 = precision * recall * 2.0 / (precision + recall);
  f1->reset();
  f1->update({longs({1, 0, 1, 1}), longs({1, 1, 1, 0})});  // tp 2, fp 1, fn 1
  f1->update({longs({0, 1}), longs({0, 1})});              // tp 3, fp 1, fn 1
  const double p = 3.0 / 4, r = 3.0 / 4;
  EXPECT_NEAR(f1->compute().number(), 2 * p * r / (p + r), 1e-12);
  f1->reset();
  EXPECT_THROW(f1->compute(), std::exception) << "reset reaches the sources";
}

// By hand, each source is updated once per call, through its own output_transform (as its
// attached handler would; ignite's update passes the output untransformed), and a lambda's
// state_dict holds its sources' state (once for a source read twice).
TEST(MetricsLambdaTest, UpdateByHandAppliesEachSourcesTransformOnce) {
  std::shared_ptr<km::Metric> acc = std::make_shared<km::Accuracy>([](const Value& o) {
    return Value{o["logits"], o["y"]};
  });
  auto ratio = acc / (acc + 1.0);
  ASSERT_EQ(ratio->sources().size(), 1u);
  ratio->update(Value::named({{"y", longs({0, 1, 2})}, {"logits", logits_for({0, 1, 3})}}));
  EXPECT_DOUBLE_EQ(ratio->compute().number(), (2.0 / 3) / (2.0 / 3 + 1));
  const kindling::StateDict state = ratio->state_dict();
  const auto rank0 = state.at("__metric_state_per_rank").toList().get(0).toGenericDict();  // ignite's layout
  for (const auto& entry : rank0)
    EXPECT_EQ(entry.key().toStringRef().rfind("args/0/", 0), 0u) << "only the first place";
  EXPECT_TRUE(rank0.contains("args/0/_num_correct"));
  EXPECT_EQ(rank0.at("args/0/_num_examples").toInt(), 3) << "updated once";

  std::shared_ptr<km::Metric> restored = std::make_shared<km::Accuracy>();
  auto same = restored / (restored + 1.0);
  same->load_state_dict(state);
  EXPECT_DOUBLE_EQ(restored->compute().number(), 2.0 / 3);
}

TEST(MetricAttachTest, UsagesDecideWhenResetUpdateAndComputeRun) {
  std::vector<Value> data{Value(1.0), Value(3.0), Value(5.0)};
  auto per_batch = std::make_shared<km::Average>();
  auto running = std::make_shared<km::Average>();
  auto epoch = std::make_shared<km::Average>();
  Engine engine([](Engine&, const Value& b) { return b; });
  per_batch->attach(engine, "batch", km::Usage::kBatchWise);
  running->attach(engine, "running", km::Usage::kRunningBatchWise);
  epoch->attach(engine, "epoch");
  std::vector<double> batch_values, running_values;
  engine.on(Events::ITERATION_COMPLETED, [&](Engine& e) {
    batch_values.push_back(e.state().metrics.at("batch").number());
    running_values.push_back(e.state().metrics.at("running").number());
  });
  engine.run(data, 2);
  EXPECT_EQ(batch_values, (std::vector<double>{1, 3, 5, 1, 3, 5}));
  EXPECT_EQ(running_values, (std::vector<double>{1, 2, 3, 2.5, 2.6, 3}));  // reset once per run
  EXPECT_DOUBLE_EQ(engine.state().metrics.at("epoch").number(), 3.0);
  EXPECT_TRUE(epoch->is_attached(engine));
  EXPECT_FALSE(epoch->is_attached(engine, km::Usage::kBatchWise));
  epoch->detach(engine);
  EXPECT_FALSE(epoch->is_attached(engine));
  EXPECT_EQ(engine.state().metrics.count("epoch"), 0u);
  km::Average on_stack;
  EXPECT_THROW(on_stack.attach(engine, "x"), UsageError);  // must be owned by a shared_ptr
}

TEST(MetricAttachTest, BatchFilteredUpdatesOnTheFilteredIterationsOnly) {
  std::vector<Value> data{Value(1.0), Value(3.0), Value(5.0), Value(7.0), Value(9.0)};
  auto every_other = std::make_shared<km::Average>();
  auto from_lambda_source = std::make_shared<km::Average>();
  auto lambda = from_lambda_source * 10.0;
  Engine engine([](Engine&, const Value& b) { return b; });
  const km::Usage filtered = km::BatchFiltered(Events::ITERATION_COMPLETED.every(2));
  every_other->attach(engine, "every_other", filtered);
  lambda->attach(engine, "lambda", filtered);  // its source updated by the lambda's own filtered handler
  engine.run(data, 2);
  // Epoch 2 (reset at its start) is iterations 6..10 over 1, 3, 5, 7, 9: the even ones hold 1, 5, 9.
  EXPECT_DOUBLE_EQ(engine.state().metrics.at("every_other").number(), (1.0 + 5.0 + 9.0) / 3);
  EXPECT_DOUBLE_EQ(engine.state().metrics.at("lambda").number(), 10.0 * (1.0 + 5.0 + 9.0) / 3);
  EXPECT_STREQ(filtered.name(), "batch_filtered");
  EXPECT_TRUE(every_other->is_attached(engine, filtered));
  EXPECT_FALSE(every_other->is_attached(engine, km::BatchFiltered(Events::ITERATION_COMPLETED.every(2))))
      << "another filter, though it counts alike, is another usage (as ignite's filtered events)";
  EXPECT_EQ(every_other->attached_usages(engine), std::vector<km::Usage>{filtered});
  every_other->detach(engine, filtered);
  EXPECT_FALSE(every_other->is_attached(engine, filtered));
  EXPECT_EQ(engine.state().metrics.count("every_other"), 0u);

  Engine one_epoch([](Engine&, const Value& b) { return b; });
  auto first_three = std::make_shared<km::Average>();
  first_three->attach(one_epoch, "first_three", km::BatchFiltered(Events::ITERATION_COMPLETED.before(4)));
  one_epoch.run(data, 1);
  EXPECT_DOUBLE_EQ(one_epoch.state().metrics.at("first_three").number(), (1.0 + 3.0 + 5.0) / 3);

  EXPECT_NE(error_of([] { km::BatchFiltered(Events::EPOCH_COMPLETED.every(2)); })
                .find("must be ITERATION_COMPLETED with a filter (e.g. Events::ITERATION_COMPLETED.every(2)), got "
                      "EPOCH_COMPLETED(every=2)"),
            std::string::npos);
  // A usage of one's own (ignite's MetricUsage): reset per epoch, update and compute every 3rd iteration.
  const km::Usage own("every_third", {Events::EPOCH_STARTED, Events::ITERATION_COMPLETED.every(3),
                                      Events::ITERATION_COMPLETED.every(3)});
  auto mine = std::make_shared<km::Average>();
  Engine third([](Engine&, const Value& b) { return b; });
  mine->attach(third, "mine", own);
  std::vector<double> seen;
  third.on(Events::ITERATION_COMPLETED.every(3),
           [&](Engine& e) { seen.push_back(e.state().metrics.at("mine").number()); });
  third.run(data, 2);  // iterations 3, 6, 9: values 5; 1 (epoch 2 reset); 1 and 7
  EXPECT_EQ(seen, (std::vector<double>{5, 1, 4}));
  EXPECT_STREQ(km::to_string(own), "every_third");
}

TEST(RunningAverageTest, OfAMetricAndItsFormula) {
  auto src = std::make_shared<km::Accuracy>();
  auto running = km::RunningAverage::of_metric(src, 0.5);
  Engine engine([](Engine&, const Value& b) { return b; });
  running->attach(engine, "running");
  std::vector<double> seen;
  engine.on(Events::ITERATION_COMPLETED, [&](Engine& e) { seen.push_back(e.state().metrics.at("running").number()); });
  std::vector<Value> data{
      {logits_for({0, 1}), longs({0, 1})}, {logits_for({0, 1}), longs({1, 0})}, {logits_for({0, 1}), longs({0, 0})}};
  engine.run(data, 1);
  EXPECT_EQ(seen, (std::vector<double>{1.0, 0.5, 0.5}));  // 1; 0.5*1 + 0.5*0; 0.5*0.5 + 0.5*0.5
  EXPECT_THROW(km::RunningAverage::of_output([](const Value& v) { return v; }, 1.5), UsageError);
  EXPECT_THROW(km::RunningAverage::of_output({}), UsageError);
}

}  // namespace
