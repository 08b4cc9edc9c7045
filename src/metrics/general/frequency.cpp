// Frequency (kindling/metrics/frequency.h): a count and the time it took, over ranks.
#include "kindling/metrics/frequency.h"

#include <ATen/ATen.h>

#include <cmath>
#include <utility>

namespace kindling {
namespace metrics {

Frequency::Frequency(OutputTransform output_transform, c10::Device device)
    : Metric(std::move(output_transform), device) {
  Frequency::reset();
}

void Frequency::reset() {
  start_ = std::chrono::steady_clock::now();
  count_ = 0;
  elapsed_ = 0;
}

void Frequency::update(const Value& output) {
  KINDLING_CHECK(output.is_number() || (output.is_tensor() && output.tensor().numel() == 1),
                 "kindling::metrics::Frequency: the (transformed) engine output must be a count (a number or a "
                 "one-element tensor), but it is ",
                 output.to_string(), "; set an output_transform that gives, say, the batch's samples or tokens");
  count_ += output.number();
  elapsed_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

Value Frequency::compute() {
  const double count = reduce(count_), elapsed = reduce(elapsed_);
  if (elapsed <= 0) {
    throw NotComputableError(detail::rank_prefix() +
                             "kindling::metrics::Frequency must have at least one update before it can be computed");
  }
  return Value(std::floor(count / elapsed * static_cast<double>(dist::get_world_size())));
}

void Frequency::attach(engine::Engine& engine, const std::string& name, const Usage& usage) {
  Metric::attach(engine, name, usage);
}

}  // namespace metrics
}  // namespace kindling
