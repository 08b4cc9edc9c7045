#pragma once
// Metric values as text, as the multi-process metric tests pass them from the workers (lines
// "METRIC <name> <numbers>" on stdout) to the test that compares them
// (distributed_metrics_test.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "support/metrics.h"

namespace kindling {
namespace testing {

/// A metric's value as comma-separated numbers (17 significant digits; "nan", "inf" as printf
/// writes them): a number; a tensor's elements; a tuple's (the curves) or named value's (a
/// MetricGroup's, by name) tensors one after the other.
inline std::string as_text(const engine::Value& value) {
  std::vector<at::Tensor> tensors;
  if (value.is_tuple()) {
    tensors = value.tuple_elements();
  } else if (value.is_named()) {
    for (const auto& kv : value.named_elements()) tensors.push_back(kv.second);
  } else {
    tensors.push_back(value.tensor());  // a number as a 0-dim tensor
  }
  std::ostringstream text;
  for (const at::Tensor& tensor : tensors) {
    const at::Tensor t = tensor.to(at::kDouble).reshape(-1);
    for (int64_t i = 0; i < t.numel(); ++i) {
      char buf[40];
      std::snprintf(buf, sizeof(buf), "%.17g", t[i].item<double>());
      text << (text.tellp() > 0 ? "," : "") << buf;
    }
  }
  return text.str();
}

/// Each metric's value as text, by a name of one word (the workers print "METRIC <name>
/// <value>" lines; ClassificationReport's "macro avg/recall" gets an underscore).
inline std::map<std::string, std::string> texts_of(const engine::ValueMap& metrics) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : metrics) {
    std::string key = name;
    std::replace(key.begin(), key.end(), ' ', '_');
    out[key] = as_text(value);
  }
  return out;
}

/// The numbers of as_text()'s text.
inline std::vector<double> numbers(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stod(item));
  return out;
}

/// Equal as metric values: NaN to NaN, infinities exactly, numbers within `tolerance` relative
/// (absolute below 1).
inline bool same_number(double have, double want, double tolerance) {
  if (std::isnan(want) || std::isnan(have)) return std::isnan(want) && std::isnan(have);
  return have == want || std::abs(have - want) <= tolerance * std::max(1.0, std::abs(want));
}

/// name -> text of a worker's "METRIC <name> <text>" lines (other lines are skipped).
inline std::map<std::string, std::string> metric_lines(const std::string& out) {
  return tagged_lines(out, "METRIC");
}

}  // namespace testing
}  // namespace kindling
