#pragma once
// Written for kindling's bench_reducer; found only where LibTorch lacks the real file (the
// folder is searched after LibTorch's: -idirafter).
//
// LibTorch 1.13 installs torch/csrc/distributed/c10d/reducer.hpp, which includes this header,
// but not the header itself (its distributed/autograd folder is not installed; 2.x wheels
// have it). reducer.hpp needs two names from it: DistAutogradContext::GradCallback (a
// static_assert compares it with the Reducer's own GradCallback) and ContextPtr (the Reducer
// holds one, a shared_ptr, plus a raw atomic pointer). Neither changes the Reducer's layout,
// and every Reducer member function is compiled into libtorch, so declaring just these two is
// enough to use the Reducer from C++.
#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
