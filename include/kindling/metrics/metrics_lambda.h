#pragma once
/// \file
/// MetricsLambda (ignite's): a metric computed from other metrics' values, and the
/// arithmetic on metrics that builds one.
///
/// \code
///   auto precision = std::make_shared<Precision>();
///   auto recall = std::make_shared<Recall>();
///   auto f1 = precision * recall * 2.0 / (precision + recall + 1e-20);   // a MetricsLambda
///   f1->attach(evaluator, "f1");   // precision and recall are reset and updated for it
/// \endcode
///
/// Attaching a MetricsLambda attaches the reset and update handlers of every metric it
/// depends on, nested lambdas included, but not their compute: they do not appear in
/// State::metrics unless attached themselves. A dependency shared by several lambdas, or
/// also attached on its own with a usage of the same events, is still reset and updated
/// once per event, through its own output_transform.
///
/// state_dict() and load_state_dict() cover the accumulators of the metrics it computes from
/// (sources()), as ignite's MetricsLambda.state_dict nests its arguments': a source found at
/// args()[i] (inside a nested lambda, at its args()[j]) under "args/<i>/<key>"
/// ("args/<i>/args/<j>/<key>"); a source met twice is saved once, at its first place. So a
/// lambda checkpoints and reshards as its sources do, also as a member of a MetricGroup.
/// One limit: a lambda attached on its own and restored in the middle of an epoch loses the
/// restored part, because its sources' reset handlers (which do not know of the restore) clear
/// them when the resumed epoch starts; as a MetricGroup member it keeps it (the group's reset
/// is the one that is skipped).
///
/// Ranks: compute() computes the dependencies in order, so it makes their collectives; call
/// it on every rank (the attached handler does).

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API MetricsLambda : public Metric {
 public:
  /// Receives the dependencies' computed values, in the order of `args`.
  using Function = std::function<Value(const std::vector<Value>&)>;

  /// compute() is f(args[0]->compute(), args[1]->compute(), ...). Registers the sources'
  /// state (see the file comment). Throws kindling::UsageError for an empty f or a null
  /// argument.
  MetricsLambda(Function f, std::vector<std::shared_ptr<Metric>> args);

  /// Resets every dependency (nested lambdas recursively). Local.
  void reset() override;
  /// Not attached (by hand, or as a member of a MetricGroup): updates every source (see
  /// sources()) once, with `output` through that source's own output_transform, as the
  /// handlers of an attached lambda do (ignite's MetricsLambda.update passes `output` to its
  /// arguments untransformed, and a source shared by two branches twice). Attached to an
  /// engine, does nothing (the engine's call: the sources are updated by their own handlers).
  /// Throws what a source's update or output_transform throws. Local.
  void update(const Value& output) override;
  /// f of the dependencies' values (tensors moved to the CPU). Throws what a dependency's
  /// compute throws (NotComputableError among others). A collective when the dependencies'
  /// computes are: all ranks.
  Value compute() override;
  std::string name() const override { return "MetricsLambda"; }

  /// Attaches the dependencies' reset and update handlers on the usage's events, then this
  /// lambda as Metric::attach does (its compute stores under `name`).
  void attach(engine::Engine& engine, const std::string& name, const Usage& usage = Usage::kEpochWise) override;
  /// Removes this lambda's handlers and the dependencies' handlers it added (a dependency
  /// still used by another attached lambda keeps them).
  void detach(engine::Engine& engine, const Usage& usage = Usage::kEpochWise) override;

  /// The arguments, as given to the constructor (ignite's `args`).
  const std::vector<std::shared_ptr<Metric>>& args() const { return args_; }
  /// The metrics this lambda computes from: the arguments that are not lambdas, and nested
  /// lambdas' sources, each once, depth first in the order of the arguments. They are what
  /// update() and attach() update, and whose state state_dict() saves. Local.
  const std::vector<std::shared_ptr<Metric>>& sources() const { return sources_; }

 private:
  struct Registration;
  Function f_;
  std::vector<std::shared_ptr<Metric>> args_;
  std::vector<std::shared_ptr<Metric>> sources_;
  // By Engine::id(), then usage: the dependency handlers this lambda holds.
  std::map<const void*, std::map<Usage, std::vector<std::shared_ptr<Registration>>>> registrations_;
};

/// a op b for op in '+', '-', '*', '/': numbers give a number; with a tensor the result is
/// a tensor (a number acts as a Python scalar in type promotion; '/' is true division).
/// Throws kindling::UsageError for other kinds of values or another op.
KINDLING_API Value apply(const Value& a, const Value& b, char op);

/// Arithmetic on metrics (and numbers on either side): a MetricsLambda computing the
/// operation on the computed values with apply(). Throws kindling::UsageError for a null metric.
KINDLING_API std::shared_ptr<MetricsLambda> operator+(const std::shared_ptr<Metric>& a,
                                                      const std::shared_ptr<Metric>& b);
KINDLING_API std::shared_ptr<MetricsLambda> operator+(const std::shared_ptr<Metric>& a, double b);
KINDLING_API std::shared_ptr<MetricsLambda> operator+(double a, const std::shared_ptr<Metric>& b);
KINDLING_API std::shared_ptr<MetricsLambda> operator-(const std::shared_ptr<Metric>& a,
                                                      const std::shared_ptr<Metric>& b);
KINDLING_API std::shared_ptr<MetricsLambda> operator-(const std::shared_ptr<Metric>& a, double b);
KINDLING_API std::shared_ptr<MetricsLambda> operator-(double a, const std::shared_ptr<Metric>& b);
KINDLING_API std::shared_ptr<MetricsLambda> operator*(const std::shared_ptr<Metric>& a,
                                                      const std::shared_ptr<Metric>& b);
KINDLING_API std::shared_ptr<MetricsLambda> operator*(const std::shared_ptr<Metric>& a, double b);
KINDLING_API std::shared_ptr<MetricsLambda> operator*(double a, const std::shared_ptr<Metric>& b);
KINDLING_API std::shared_ptr<MetricsLambda> operator/(const std::shared_ptr<Metric>& a,
                                                      const std::shared_ptr<Metric>& b);
KINDLING_API std::shared_ptr<MetricsLambda> operator/(const std::shared_ptr<Metric>& a, double b);
KINDLING_API std::shared_ptr<MetricsLambda> operator/(double a, const std::shared_ptr<Metric>& b);

}  // namespace metrics
}  // namespace kindling
