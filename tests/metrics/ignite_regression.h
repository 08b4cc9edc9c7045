#pragma once
// ignite 0.5.5's regression metrics on the batches of a test (tests/metrics/ignite_regression.py,
// run by the build's Python), for regression_sums_test.cpp and regression_epoch_test.cpp.
#include <ATen/ATen.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/files.h"
#include "support/multiprocess.h"

namespace kindling {
namespace testing {

using RegressionBatch = std::pair<at::Tensor, at::Tensor>;  // y_pred, y: float32 (N,)

inline std::string float_csv(const at::Tensor& t) {
  std::ostringstream out;
  for (int64_t i = 0; i < t.numel(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", t[i].item<float>());
    out << (i ? "," : "") << buf;
  }
  return out.str();
}

/// ignite's value of each metric in `names` (ignite_regression.py's NAME[:ARG]) over `batches`.
/// Returns false with `skip` set where the build's Python has no ignite 0.5.5 under torch 1.x
/// (the script's exit 77); fails the test (gtest assertion in the caller) through `error`.
inline bool ignite_regression(const std::vector<RegressionBatch>& batches, const std::vector<std::string>& names,
                              std::map<std::string, double>& values, std::string& skip, std::string& error) {
  TempDir dir("regression");
  const std::string path = dir.path() + "/batches.txt";
  {
    std::ofstream data(path);
    for (const auto& [pred, target] : batches) data << float_csv(pred) << ";" << float_csv(target) << "\n";
  }
  std::vector<std::string> argv{KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/metrics/ignite_regression.py", path};
  argv.insert(argv.end(), names.begin(), names.end());
  const auto r = run_command(argv);
  if (r.exit_code == 77) {
    skip = r.out;
    return false;
  }
  if (!r.ok()) {
    error = describe({r});
    return false;
  }
  std::istringstream lines(r.out);
  for (std::string name, value; lines >> name >> value;) {
    if (name != "IGNITE") values[name] = std::stod(value);
  }
  if (values.size() != names.size()) error = "ignite printed " + std::to_string(values.size()) + " values:\n" + r.out;
  return error.empty();
}

}  // namespace testing
}  // namespace kindling
