// MetricGroup: members updated from one output and computed in order into named tensors.
#include "kindling/metrics/metric_group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>

#include "kindling/metrics/metrics_lambda.h"

namespace kindling {
namespace metrics {

namespace {

// Adds the entry `key` of the group's value; two members' entries may not share a name.
void group_entry(std::map<std::string, at::Tensor>& entries, const std::string& key, at::Tensor value) {
  KINDLING_CHECK(entries.emplace(key, std::move(value)).second,
                 "kindling::metrics::MetricGroup::compute: two members' values would both be stored as '", key,
                 "' (a member's tuple or named value gives '<name>/<i>' or '<name>/<key>' entries); rename one of "
                 "the members");
}

}  // namespace

MetricGroup::MetricGroup(Members metrics, OutputTransform output_transform)
    : Metric(std::move(output_transform)), metrics_(std::move(metrics)) {
  std::set<std::string> names;
  std::map<const Metric*, std::string> seen;
  for (const auto& [name, metric] : metrics_) {
    KINDLING_CHECK(!name.empty(),
                   "kindling::metrics::MetricGroup: a member has an empty name; give every metric "
                   "of the group the name its value is stored under");
    KINDLING_CHECK(metric != nullptr, "kindling::metrics::MetricGroup: the member '", name,
                   "' is a null pointer; pass a metric made with std::make_shared");
    KINDLING_CHECK(names.insert(name).second, "kindling::metrics::MetricGroup: the name '", name,
                   "' is given to two members; every member needs its own name");
    const auto [other, fresh] = seen.emplace(metric.get(), name);
    KINDLING_CHECK(fresh, "kindling::metrics::MetricGroup: the members '", other->second, "' and '", name,
                   "' are the same ", metric->name(),
                   " object, which would update twice per batch; make one metric object per member");
    register_member_state(name + "/", *metric);
    // A lambda member is fed through its sources, so that a source shared by several members
    // (a ConfusionMatrix and IoU over it) is updated once per batch.
    // (A named vector, not a temporary chosen by ?:: GCC 12 reports -Wfree-nonheap-object on
    // that temporary's destruction in some unity batches of the 2.15 build, a false positive.)
    std::vector<std::shared_ptr<Metric>> feeds{metric};
    if (const auto lambda = std::dynamic_pointer_cast<MetricsLambda>(metric)) feeds = lambda->sources();
    for (const auto& m : feeds) {
      if (std::find(fed_.begin(), fed_.end(), m) == fed_.end()) fed_.push_back(m);
    }
  }
}

void MetricGroup::reset() {
  for (const auto& member : metrics_) member.second->reset();
}

void MetricGroup::update(const Value& output) {
  for (const auto& m : fed_) {
    const OutputTransform& transform = m->output_transform();
    m->update(transform ? transform(output) : output);
  }
}

Value MetricGroup::compute() {
  std::map<std::string, at::Tensor> entries;
  for (const auto& [name, metric] : metrics_) {
    const Value v = metric->compute();  // in the members' order on every rank: their collectives match
    switch (v.kind()) {
      case Value::Kind::kNone: break;
      case Value::Kind::kNumber:
      case Value::Kind::kTensor: group_entry(entries, name, v.tensor()); break;
      case Value::Kind::kTuple:
        for (std::size_t i = 0; i < v.size(); ++i) group_entry(entries, name + "/" + std::to_string(i), v[i]);
        break;
      case Value::Kind::kNamed:
        for (const auto& kv : v.named_elements()) group_entry(entries, name + "/" + kv.first, kv.second);
        break;
    }
  }
  return Value::named(std::move(entries));
}

void MetricGroup::attach(engine::Engine& engine, const std::string& name, const Usage& usage) {
  for (const auto& member : metrics_) {
    KINDLING_CHECK(member.first != name, "kindling::metrics::MetricGroup::attach: the name '", name,
                   "' is also a member's name, under which that member's value is stored; attach the group under "
                   "another name");
  }
  Metric::attach(engine, name, usage);
}

}  // namespace metrics
}  // namespace kindling
