// Internal to kindling's metrics: a tensor's shape as text for messages ("[4, 10]").
#pragma once

#include <ATen/core/Tensor.h>

#include <sstream>
#include <string>

namespace kindling {
namespace metrics {

inline std::string shape_text(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace metrics
}  // namespace kindling
