#pragma once
// Engines the engine tests share.
#include <kindling/kindling.h>

#include <vector>

namespace kindling {
namespace testing {

/// An engine over int batches whose process function returns the batch, and appends it to
/// `processed` when given.
inline engine::Engine counting_engine(std::vector<int>* processed = nullptr) {
  return engine::Engine([processed](engine::Engine&, const int& batch) -> engine::Value {
    if (processed) processed->push_back(batch);
    return batch;
  });
}

}  // namespace testing
}  // namespace kindling
