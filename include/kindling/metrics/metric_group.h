#pragma once
/// \file
/// MetricGroup (ignite's): named metrics reset, updated and computed together, attached once.
/// Each update passes the engine's output through the group's output_transform, then through
/// each member's own output_transform, to the member's update(). A member that is a
/// MetricsLambda (Fbeta, IoU, `acc * 2.0 + 1.0`) is updated through its sources
/// (MetricsLambda::sources()), each through its own output_transform, as when the lambda is
/// attached on its own; a metric that several members compute from (a ConfusionMatrix member
/// and IoU over it) is updated once per batch.
///
/// \code
///   auto group = std::make_shared<MetricGroup>(MetricGroup::Members{
///       {"accuracy", std::make_shared<Accuracy>()},
///       {"roc_auc", std::make_shared<ROC_AUC>([](const Value& o) { return Value{o[0].select(1, 1), o[1]}; })},
///   });
///   group->attach(evaluator, "eval_metrics");
///   evaluator.run(loader);
///   double acc = evaluator.state().metrics.at("accuracy").number();      // each member by its name
///   at::Tensor all = evaluator.state().metrics.at("eval_metrics")["roc_auc"];  // and the whole group
/// \endcode
///
/// The group's value is named tensors (engine::Value::named, which a dict of ignite becomes):
/// one entry per member, named as the member, holding its value as a tensor: a number as a
/// 0-dim float64 tensor, a tensor as itself. A member whose value is a tuple (RocCurve,
/// PrecisionRecallCurve) gives one entry per element, "<name>/0", "<name>/1", ...; one whose
/// value is named gives "<name>/<key>" entries; one whose value is none gives no entry.
/// Attached, Metric::completed() stores the group's value under the attached name and each
/// entry under its own key (a 0-dim tensor as a number), as ignite's MetricGroup.
///
/// state_dict() and load_state_dict() cover every member's accumulators, under the keys
/// "<name>/<key>" (ignite saves the members' states too), and reshard as each member does. A
/// MetricsLambda member's keys are its sources' (see metrics_lambda.h):
/// "<name>/args/<i>/<key>"; a metric shared by several members is saved under each of them.
///
/// Ranks: update() is local. compute() computes the members one after the other in the
/// order given, so a member's collectives run in the same order on every rank: every rank
/// must build its group with the same members in the same order.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

/// Named metrics updated from one output and computed together into one named value (see the
/// file comment). Attach it like any metric; owned by a std::shared_ptr.
class KINDLING_API MetricGroup : public Metric {
 public:
  /// (name, metric) pairs, in the order of updates and computes.
  using Members = std::vector<std::pair<std::string, std::shared_ptr<Metric>>>;

  /// Throws kindling::UsageError for an empty or repeated name, a null metric, or one metric
  /// object given twice (it would update twice per batch).
  explicit MetricGroup(Members metrics, OutputTransform output_transform = {});

  /// Resets every member. Local.
  void reset() override;
  /// Gives `output` (already through the group's output_transform) to every member, through
  /// the member's output_transform; a MetricsLambda member to each of its sources, through
  /// the source's; each metric once. Local; rethrows what an update() or output_transform
  /// throws.
  void update(const Value& output) override;
  /// Every member's value, as named tensors (see the file comment). A collective when a
  /// member's compute() is (every rank, same order). Rethrows what a member's compute()
  /// throws; throws kindling::UsageError when two entries would have one name.
  Value compute() override;
  std::string name() const override { return "MetricGroup"; }
  /// Metric::attach(), after checking that `name` is no member's name (whose values are
  /// stored under their own names). Throws kindling::UsageError then.
  void attach(engine::Engine& engine, const std::string& name, const Usage& usage = Usage::kEpochWise) override;

  /// The members, in order (ignite's `metrics`).
  const Members& metrics() const { return metrics_; }

 private:
  Members metrics_;
  // What update() feeds: the members, a MetricsLambda replaced by its sources, each once.
  std::vector<std::shared_ptr<Metric>> fed_;
};

}  // namespace metrics
}  // namespace kindling
