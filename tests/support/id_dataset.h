#pragma once
// A dataset whose samples carry their ids, for tests that account for every sample of an
// epoch (elastic resume, tests/engine/elastic_resume_test.cpp and tests/cluster/elastic_train.cpp).
#include <ATen/ATen.h>

#include "kindling/data/dataset.h"

namespace kindling {
namespace testing {

/// Sample i of n: data [i, t, t^2, 1 - t] with t = i / n (column 0 is the id, not a feature:
/// the model sees columns 1..3), target 2t - t^2 / 2 + 1/4 (a linear model fits it closely).
class IdDataset : public data::Dataset {
 public:
  explicit IdDataset(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t index) const override {
    const float t = static_cast<float>(index) / static_cast<float>(n_);
    return {at::tensor({static_cast<float>(index), t, t * t, 1.0f - t}), at::tensor({2.0f * t - 0.5f * t * t + 0.25f})};
  }

 private:
  int64_t n_;
};

}  // namespace testing
}  // namespace kindling
