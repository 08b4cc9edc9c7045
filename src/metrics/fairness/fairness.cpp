// SubgroupMetric, SubgroupDifference, SubgroupAccuracyDifference, SelectionRate and
// DemographicParityDifference (kindling/metrics/fairness.h).
#include "kindling/metrics/fairness.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "kindling/metrics/accuracy.h"

namespace kindling {
namespace metrics {
namespace {

// (y_pred, y, group_labels) from a tuple of three tensors or the three names.
std::vector<at::Tensor> three_parts(const Value& output) {
  if (output.is_named()) {
    const auto& named = output.named_elements();
    std::vector<at::Tensor> out;
    for (const char* key : {"y_pred", "y", "group_labels"}) {
      auto it = named.find(key);
      KINDLING_CHECK(it != named.end(), "kindling::metrics::SubgroupMetric: the output has no \"", key,
                     "\"; give (y_pred, y, group_labels) or set an output_transform");
      out.push_back(it->second);
    }
    return out;
  }
  KINDLING_CHECK(output.is_tuple() && output.tuple_elements().size() == 3,
                 "kindling::metrics::SubgroupMetric: the (transformed) engine output must be (y_pred, y, "
                 "group_labels), three tensors, but it is ",
                 output.to_string());
  return output.tuple_elements();
}

}  // namespace

SubgroupMetric::SubgroupMetric(Factory make, std::vector<int64_t> groups, OutputTransform output_transform,
                               c10::Device device)
    : Metric(std::move(output_transform), device), groups_(std::move(groups)) {
  KINDLING_CHECK(static_cast<bool>(make),
                 "kindling::metrics::SubgroupMetric: the factory of the groups' metric is "
                 "empty");
  KINDLING_CHECK(!groups_.empty(), "kindling::metrics::SubgroupMetric: groups must name at least one group");
  KINDLING_CHECK(std::set<int64_t>(groups_.begin(), groups_.end()).size() == groups_.size(),
                 "kindling::metrics::SubgroupMetric: every group must be named once, but groups hold an id twice");
  for (int64_t g : groups_) {
    metrics_.push_back(make());
    KINDLING_CHECK(metrics_.back() != nullptr, "kindling::metrics::SubgroupMetric: the factory returned no metric");
    register_member_state("_metrics/" + std::to_string(g) + "/", *metrics_.back());
  }
}

void SubgroupMetric::reset() {
  for (auto& m : metrics_) m->reset();
}

void SubgroupMetric::update(const Value& output) {
  const std::vector<at::Tensor> parts = three_parts(output);
  const at::Tensor& labels = parts[2];
  KINDLING_CHECK(parts[0].dim() >= 1 && parts[1].dim() >= 1 && labels.dim() == 1 &&
                     parts[0].size(0) == labels.size(0) && parts[1].size(0) == labels.size(0),
                 "kindling::metrics::", name(),
                 ": y_pred, y and group_labels must have the same batch size, group_labels of shape (N,), but given ",
                 parts[0].sizes(), ", ", parts[1].sizes(), " and ", labels.sizes());
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    const at::Tensor mask = labels == groups_[i];
    if (!mask.any().item<bool>()) continue;
    metrics_[i]->update(Value::tuple({parts[0].index({mask}), parts[1].index({mask})}));
  }
}

std::vector<std::pair<int64_t, at::Tensor>> SubgroupMetric::group_values() {
  std::vector<std::pair<int64_t, at::Tensor>> out;
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    Value v;
    try {
      v = metrics_[i]->compute();  // every rank takes the same branch: the value is reduced
    } catch (const NotComputableError&) {
      continue;
    }
    KINDLING_CHECK(v.is_number() || v.is_tensor(), "kindling::metrics::", name(), ": the metric of group ", groups_[i],
                   " gave ", v.to_string(), "; only numbers and tensors can be compared across groups");
    out.emplace_back(groups_[i], v.tensor().to(at::kDouble).cpu());
  }
  return out;
}

Value SubgroupMetric::compute() {
  std::map<std::string, at::Tensor> out;
  for (auto& [group, value] : group_values()) out[std::to_string(group)] = value;
  return Value::named(out);
}

Value SubgroupDifference::compute() {
  const auto values = group_values();
  if (values.size() < 2) {
    throw NotComputableError(detail::rank_prefix() + "kindling::metrics::" + name() + ": " +
                             (values.empty() ? std::string("the groups must have at least one example")
                                             : std::string("a disparity needs at least two groups with examples, "
                                                           "got one")) +
                             " before it can be computed");
  }
  std::vector<at::Tensor> stacked;
  for (const auto& entry : values) stacked.push_back(entry.second);
  const at::Tensor all = at::stack(stacked);
  return Value((std::get<0>(all.max(0)) - std::get<0>(all.min(0))).max().item<double>());
}

SubgroupAccuracyDifference::SubgroupAccuracyDifference(std::vector<int64_t> groups, bool is_multilabel,
                                                       OutputTransform output_transform, c10::Device device)
    : SubgroupDifference(
          [is_multilabel, device] { return std::make_shared<Accuracy>(OutputTransform{}, is_multilabel, device); },
          std::move(groups), std::move(output_transform), device) {}

SelectionRate::SelectionRate(OutputTransform output_transform, bool is_multilabel, c10::Device device)
    : ClassificationMetric(std::move(output_transform), is_multilabel, device) {
  register_state("_num_positives", &positives_, Reshard::kSum);
  register_state("_num_examples", &num_examples_, Reshard::kSum);
  SelectionRate::reset();
}

void SelectionRate::reset() {
  positives_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device()));
  num_examples_ = 0;
  reset_type();
}

void SelectionRate::update(const Value& output) {
  const auto [y_pred, y] = y_pred_and_y(output);
  check(y_pred.detach(), y.detach());
  at::Tensor positives;
  int64_t total = 0;
  if (input_type() == InputType::kBinary) {
    positives = at::bincount(y_pred.detach().reshape({-1}).to(at::kLong), {}, 2).to(at::kDouble);
    total = y_pred.numel();
  } else if (input_type() == InputType::kMulticlass) {
    const at::Tensor predicted = y_pred.detach().argmax(1).reshape({-1});
    positives = at::bincount(predicted, {}, y_pred.size(1)).to(at::kDouble);
    total = predicted.numel();
  } else {
    const int64_t classes = y_pred.size(1);
    positives = y_pred.detach().movedim(1, -1).reshape({-1, classes}).sum(0).to(at::kDouble);
    total = y_pred.numel() / classes;
  }
  KINDLING_CHECK(positives_.dim() == 0 || positives_.sizes() == positives.sizes(),
                 "kindling::metrics::SelectionRate: every batch must have the same number of classes; the earlier "
                 "ones had ",
                 positives_.numel(), ", this one has ", positives.numel());
  positives_ = positives_ + positives.to(device());
  num_examples_ += total;
}

Value SelectionRate::compute() {
  const at::Tensor positives = reduce_to_shape(positives_, num_examples_ > 0);
  const int64_t examples = reduce(num_examples_);
  if (examples == 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::SelectionRate must have at least one example before it can be "
                             "computed");
  }
  return Value((positives / static_cast<double>(examples)).cpu());
}

DemographicParityDifference::DemographicParityDifference(std::vector<int64_t> groups, bool is_multilabel,
                                                         OutputTransform output_transform, c10::Device device)
    : SubgroupDifference(
          [is_multilabel, device] { return std::make_shared<SelectionRate>(OutputTransform{}, is_multilabel, device); },
          std::move(groups), std::move(output_transform), device) {}

}  // namespace metrics
}  // namespace kindling
