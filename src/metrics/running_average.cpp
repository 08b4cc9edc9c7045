// RunningAverage: an exponential moving average of the output (averaged over ranks each
// update) or of another metric's value.
#include "kindling/metrics/running_average.h"

#include <ATen/ATen.h>

namespace kindling {
namespace metrics {

RunningAverage::RunningAverage(OutputTransform output_transform, std::shared_ptr<Metric> src, double alpha,
                               c10::Device device)
    : Metric(std::move(output_transform), device), src_(std::move(src)), alpha_(alpha) {
  KINDLING_CHECK(alpha > 0.0 && alpha <= 1.0,
                 "kindling::metrics::RunningAverage: argument alpha should be a float "
                 "between 0.0 and 1.0, got ",
                 alpha);
  register_state("_value", &value_, Reshard::kReplicated);
}

std::shared_ptr<RunningAverage> RunningAverage::of_output(OutputTransform output_transform, double alpha,
                                                          c10::Device device) {
  KINDLING_CHECK(static_cast<bool>(output_transform),
                 "kindling::metrics::RunningAverage::of_output: the "
                 "output_transform should not be empty (it picks the value to average from the engine output)");
  return std::shared_ptr<RunningAverage>(new RunningAverage(std::move(output_transform), nullptr, alpha, device));
}

std::shared_ptr<RunningAverage> RunningAverage::of_metric(std::shared_ptr<Metric> src, double alpha) {
  KINDLING_CHECK(src != nullptr, "kindling::metrics::RunningAverage::of_metric: src is null");
  const c10::Device device = src->device();
  return std::shared_ptr<RunningAverage>(new RunningAverage(OutputTransform(), std::move(src), alpha, device));
}

void RunningAverage::reset() {
  value_ = at::Tensor();
  if (src_) src_->reset();
}

void RunningAverage::update(const Value& output) {
  at::Tensor v;
  if (src_) {
    const Value computed = src_->compute();
    src_->reset();
    v = computed.tensor().to(at::TensorOptions().dtype(at::kDouble).device(device()));
  } else {
    KINDLING_CHECK(output.is_number() || output.is_tensor(),
                   "kindling::metrics::RunningAverage: the (transformed) "
                   "engine output should be a number or a tensor, but it is ",
                   output.to_string());
    v = output.tensor().detach().to(at::TensorOptions().dtype(at::kDouble).device(device()));
    const int ws = dist::get_world_size();
    if (ws > 1) v = reduce(v) / static_cast<double>(ws);
  }
  value_ = value_.defined() ? value_ * alpha_ + (1.0 - alpha_) * v : v;
}

Value RunningAverage::compute() {
  if (!value_.defined()) return Value();
  if (value_.dim() == 0) return value_.item<double>();
  return value_;
}

void RunningAverage::attach(engine::Engine& engine, const std::string& name, const Usage& usage) {
  if (src_) {
    auto& h = src_updates_[engine.id()];
    if (!h.attached()) {
      std::shared_ptr<Metric> src = src_;
      h = engine.add_event_handler(engine::Events::ITERATION_COMPLETED,
                                   [src](engine::Engine& e) { src->iteration_completed(e); });
    }
  }
  Metric::attach(engine, name, usage);
}

void RunningAverage::detach(engine::Engine& engine, const Usage& usage) {
  auto it = src_updates_.find(engine.id());
  if (it != src_updates_.end()) {
    if (it->second.attached()) it->second.remove();
    src_updates_.erase(it);
  }
  Metric::detach(engine, usage);
}

}  // namespace metrics
}  // namespace kindling
