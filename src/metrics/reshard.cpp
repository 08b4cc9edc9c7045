// Resharding a metric's saved accumulators to another world size (see reshard.h).
#include "metrics/reshard.h"

#include <ATen/ATen.h>
#include <torch/serialize.h>

#include <vector>

#include "kindling/error.h"

namespace kindling {
namespace detail {

namespace {

// A value saved by a rank that never saw input.
bool empty(const c10::IValue& v) {
  return v.isNone() || (v.isInt() && v.toInt() == 0) || (v.isList() && v.toListRef().empty()) ||
         (v.isTensor() && !v.toTensor().defined());
}

bool same(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    const at::Tensor& x = a.toTensor();
    const at::Tensor& y = b.toTensor();
    return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() && at::equal(x, y);
  }
  if (a.isInt() && b.isInt()) return a.toInt() == b.toInt();
  if (a.isDouble() && b.isDouble()) return a.toDouble() == b.toDouble();
  return torch::pickle_save(a) == torch::pickle_save(b);
}

c10::IValue summed(const c10::impl::GenericList& saved, int64_t rank, const std::string& who, const std::string& key) {
  bool ints = true;
  for (const c10::IValue& v : saved.vec()) ints = ints && v.isInt();
  if (ints) {
    int64_t total = 0;
    for (const c10::IValue& v : saved.vec()) total += v.toInt();
    return rank == 0 ? total : int64_t{0};
  }
  at::Tensor total;
  for (size_t r = 0; r < saved.size(); ++r) {
    const c10::IValue v = saved.get(r);
    if (v.isNone()) continue;
    KINDLING_CHECK(v.isTensor(), who, ": '", key, "' of saved rank ", r,
                   " should be a tensor or None to be summed, got ", v.tagKind());
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) continue;
    KINDLING_CHECK(!total.defined() || total.sizes() == t.sizes(), who, ": '", key, "' has shape ", t.sizes(),
                   " on saved rank ", r, " but ", total.sizes(), " on an earlier rank; the sums cannot be combined");
    total = total.defined() ? total + t : t.clone();
  }
  if (!total.defined()) return c10::IValue();
  return rank == 0 ? total : at::zeros_like(total);
}

c10::IValue concatenated(const c10::impl::GenericList& saved, int64_t rank, int64_t world, const std::string& who,
                         const std::string& key) {
  c10::List<at::Tensor> mine;
  for (size_t r = 0; r < saved.size(); ++r) {
    const c10::IValue v = saved.get(r);
    KINDLING_CHECK(v.isTensorList(), who, ": '", key, "' of saved rank ", r, " should be a list of tensors, got ",
                   v.tagKind());
    if (static_cast<int64_t>(r) % world != rank) continue;
    for (const at::Tensor& t : v.toTensorVector()) mine.push_back(t);
  }
  return mine;
}

c10::IValue replicated(const c10::impl::GenericList& saved, const std::string& who, const std::string& key) {
  int64_t first = -1;
  for (size_t r = 0; r < saved.size(); ++r) {
    if (empty(saved.get(r))) continue;
    if (first < 0) {
      first = static_cast<int64_t>(r);
      continue;
    }
    KINDLING_CHECK(same(saved.get(static_cast<size_t>(first)), saved.get(r)), who, ": '", key,
                   "' should be the same on every rank, but saved rank ", first, " and saved rank ", r,
                   " hold different values; this state was not saved by a consistent distributed run, so it cannot "
                   "be resharded. Resume at the saved world size of ",
                   saved.size(), " or reset the metric");
  }
  return saved.get(first < 0 ? 0 : static_cast<size_t>(first));
}

c10::IValue largest(const c10::impl::GenericList& saved, const std::string& who, const std::string& key) {
  c10::IValue best;
  for (size_t r = 0; r < saved.size(); ++r) {
    const c10::IValue v = saved.get(r);
    KINDLING_CHECK(v.isTensor() || v.isInt() || v.isDouble(), who, ": '", key, "' of saved rank ", r,
                   " should be a tensor or a number to take the largest, got ", v.tagKind());
    if (best.isNone()) {
      best = v;
    } else if (v.isTensor()) {
      KINDLING_CHECK(best.isTensor() && best.toTensor().sizes() == v.toTensor().sizes(), who, ": '", key,
                     "' of saved rank ", r, " does not match an earlier rank's (shape or type)");
      best = at::maximum(best.toTensor(), v.toTensor());
    } else {
      const auto number = [](const c10::IValue& x) {
        return x.isInt() ? static_cast<double>(x.toInt()) : x.toDouble();
      };
      KINDLING_CHECK(!best.isTensor(), who, ": '", key, "' of saved rank ", r,
                     " is a number, an earlier rank's a tensor");
      if (number(v) > number(best)) best = v;
    }
  }
  return best;
}

}  // namespace

c10::IValue reshard_metric_state(metrics::Metric::Reshard rule, const c10::impl::GenericList& saved, int64_t rank,
                                 int64_t world, const std::string& who, const std::string& key) {
  switch (rule) {
    case metrics::Metric::Reshard::kSum: return summed(saved, rank, who, key);
    case metrics::Metric::Reshard::kConcatenate: return concatenated(saved, rank, world, who, key);
    case metrics::Metric::Reshard::kReplicated: return replicated(saved, who, key);
    case metrics::Metric::Reshard::kMax: return largest(saved, who, key);
    case metrics::Metric::Reshard::kRefuse: break;
  }
  KINDLING_CHECK(
      false, who, ": '", key, "' holds the state of ", saved.size(), " rank(s) but this run has ", world,
      "; this accumulator has no rule to reshard it (metrics::Metric::Reshard::kRefuse), so the metric resumes "
      "only with the world size it was saved with. Resume at ",
      saved.size(),
      " ranks, leave the metric out of the objects loaded (it restarts at the next epoch), "
      "or register the accumulator with a Reshard rule");
  return {};
}

}  // namespace detail
}  // namespace kindling
