#pragma once
// Helpers the metric tests share.
#include <kindling/kindling.h>

#include <string>

namespace kindling {
namespace testing {

/// An output transform that hands a metric the (prediction, target) pair stored under the
/// names `pred` and `target` of a named engine output.
inline metrics::OutputTransform pick(const std::string& pred, const std::string& target) {
  return [pred, target](const engine::Value& o) { return engine::Value{o[pred], o[target]}; };
}

}  // namespace testing
}  // namespace kindling
