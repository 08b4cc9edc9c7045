#pragma once
// Metrics of kindling against ignite 0.5.5's of the same name on the same batches
// (tests/metrics/ignite_cases.py, run by the build's Python), for the metrics tests that compare
// with ignite (label_agreement_test.cpp, sample_means_test.cpp, information_test.cpp, ...): a case
// is a metric of each side and its batches.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kindling/metrics/metric.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace kindling {
namespace testing {

using MetricBatch = std::pair<at::Tensor, at::Tensor>;  // y_pred, y

/// A tensor of whole numbers or floats as a JSON (nested) list.
inline std::string json_of(const at::Tensor& t) {
  if (t.dim() == 0) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", t.item<double>());
    return buf;
  }
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < t.size(0); ++i) out << (i ? "," : "") << json_of(t[i]);
  out << "]";
  return out.str();
}

/// One comparison: ignite's `metric` made with `args` (a JSON object of its keyword arguments)
/// and kindling's from `make`, both updated with `batches`. `inputs` says what ignite's update
/// gets: "tensors" (y_pred, y); "y_pred" alone (the accumulations' single output); "tokens"
/// (lists of token ids from candidates (N, L) and references (N, R, L), negative ids dropped);
/// "text" (strings of the character codes of (N, L) rows); "detection" (a dict per image from
/// padded (B, N, 6) and (B, M, 5 or 6) rows, object_detection_test.cpp); "groups" (y's last column is each
/// sample's group: (y_pred, y, group_labels)). kindling's gets the same tensors.
struct IgniteCase {
  std::string name, metric, args;
  std::vector<MetricBatch> batches;
  std::function<std::shared_ptr<metrics::Metric>()> make;
  std::string inputs = "tensors";
};

inline std::string dtype_name(const at::Tensor& t) {
  if (t.scalar_type() == at::kDouble) return "double";
  return at::isFloatingType(t.scalar_type()) ? "float" : "long";
}

/// ignite's values of every case: name -> numbers; `skip` set where ignite is not there.
inline std::map<std::string, std::vector<double>> ignite_values(const std::vector<IgniteCase>& all, std::string& skip) {
  TempDir dir("ignite-cases");
  const std::string path = dir.path() + "/cases.json";
  {
    std::ofstream out(path);
    out << "{\"cases\": [";
    for (std::size_t c = 0; c < all.size(); ++c) {
      const IgniteCase& k = all[c];
      out << (c ? "," : "") << "{\"name\": \"" << k.name << "\", \"metric\": \"" << k.metric
          << "\", \"args\": " << k.args << ", \"dtypes\": [\"" << dtype_name(k.batches[0].first) << "\", \""
          << dtype_name(k.batches[0].second) << "\"], \"inputs\": \"" << k.inputs << "\", \"batches\": [";
      for (std::size_t b = 0; b < k.batches.size(); ++b) {
        out << (b ? "," : "") << "[" << json_of(k.batches[b].first) << "," << json_of(k.batches[b].second) << "]";
      }
      out << "]}";
    }
    out << "]}";
  }
  const auto r = run_command({KINDLING_PYTHON, KINDLING_SOURCE_DIR "/tests/metrics/ignite_cases.py", path});
  std::map<std::string, std::vector<double>> values;
  if (r.exit_code == 77) {
    skip = r.out;
    return values;
  }
  EXPECT_TRUE(r.ok()) << describe({r});
  std::istringstream lines(r.out);
  for (std::string name, text; lines >> name >> text;) {
    if (name == "IGNITE") continue;
    std::stringstream items(text);
    for (std::string item; std::getline(items, item, ',');) values[name].push_back(std::stod(item));
  }
  return values;
}

/// Every case's kindling value equals ignite's within 1e-6 relative (absolute below 1).
inline void expect_ignite_values(const std::vector<IgniteCase>& all) {
  std::string skip;
  const auto ignite = ignite_values(all, skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_EQ(ignite.size(), all.size());
  for (const IgniteCase& k : all) {
    auto metric = k.make();
    for (const auto& [pred, y] : k.batches) {
      if (k.inputs == "groups") {
        const at::Tensor rest = y.slice(1, 0, y.size(1) - 1);
        metric->update(engine::Value::tuple({pred, y.size(1) == 2 ? rest.squeeze(1) : rest, y.select(1, -1)}));
      } else {
        metric->update(k.inputs == "y_pred" ? engine::Value(pred) : engine::Value::tuple({pred, y}));
      }
    }
    const engine::Value value = metric->compute();
    // A named value's entries in key order (ignite_cases.py sorts a dict's), a tuple's in order.
    std::vector<at::Tensor> parts;
    for (const auto& entry : value.named_elements()) parts.push_back(entry.second.reshape({-1}).to(at::kDouble));
    for (const at::Tensor& t : value.tuple_elements()) parts.push_back(t.reshape({-1}).to(at::kDouble));
    const at::Tensor got = (parts.empty() ? value.tensor() : at::cat(parts)).to(at::kDouble).reshape({-1});
    const std::vector<double>& want = ignite.at(k.name);
    ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << k.name;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double have = got[static_cast<int64_t>(i)].item<double>();
      if (std::isinf(want[i])) {  // a curve's first threshold
        EXPECT_EQ(have, want[i]) << k.name << "[" << i << "]";
      } else {
        EXPECT_NEAR(have, want[i], 1e-6 * std::max(1.0, std::abs(want[i]))) << k.name << "[" << i << "]";
      }
    }
  }
}

/// Six batches of 3 to 8 samples drawn by `draw` (generator, batch size) from `seed`.
inline std::vector<MetricBatch> batches_of(uint64_t seed,
                                           const std::function<MetricBatch(at::Generator&, int64_t)>& draw) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<MetricBatch> out;
  for (int64_t b = 0; b < 6; ++b) out.push_back(draw(gen, 3 + b));
  return out;
}

}  // namespace testing
}  // namespace kindling
