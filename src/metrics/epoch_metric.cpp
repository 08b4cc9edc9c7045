// EpochMetric: stored batches, gathered from every rank at compute; compute_fn runs on rank
// 0 and its result is broadcast.
#include "kindling/metrics/epoch_metric.h"

#include <ATen/ATen.h>

#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "kindling/log.h"

namespace kindling {
namespace metrics {

namespace {

// A Value on the wire (broadcast_object): its kind and (name, tensor) entries. A negative
// kind carries the message of the exception compute_fn threw, and its type (WireError), so
// that every rank throws what rank 0 throws.
using Wire = std::pair<int, std::vector<std::pair<std::string, at::Tensor>>>;

Wire to_wire(const Value& v) {
  Wire w{static_cast<int>(v.kind()), {}};
  switch (v.kind()) {
    case Value::Kind::kNone: break;
    case Value::Kind::kNumber:
      w.second.emplace_back("", at::scalar_tensor(v.number(), at::TensorOptions().dtype(at::kDouble)));
      break;
    case Value::Kind::kTensor: w.second.emplace_back("", v.tensor()); break;
    case Value::Kind::kTuple:
      for (const auto& t : v.tuple_elements()) w.second.emplace_back("", t);
      break;
    case Value::Kind::kNamed:
      for (const auto& kv : v.named_elements()) w.second.emplace_back(kv.first, kv.second);
      break;
  }
  return w;
}

enum WireError : int { kWireError = -1, kWireUsageError = -2, kWireNotComputable = -3 };

Wire error_wire(const std::string& message, WireError type = kWireError) {
  Wire w{type, {}};
  w.second.emplace_back(message, at::zeros({0}));
  return w;
}

Value from_wire(const Wire& w) {
  switch (static_cast<Value::Kind>(w.first)) {
    case Value::Kind::kNone: return Value();
    case Value::Kind::kNumber: return w.second.at(0).second.item<double>();
    case Value::Kind::kTensor: return w.second.at(0).second;
    case Value::Kind::kTuple: {
      std::vector<at::Tensor> tensors;
      for (const auto& e : w.second) tensors.push_back(e.second);
      return Value::tuple(std::move(tensors));
    }
    case Value::Kind::kNamed: {
      std::map<std::string, at::Tensor> tensors;
      for (const auto& e : w.second) tensors.emplace(e.first, e.second);
      return Value::named(std::move(tensors));
    }
  }
  return Value();
}

// Whether `b` can follow `a` along dimension 0.
bool same_columns(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == b.dim() && (a.dim() == 1 || a.size(1) == b.size(1));
}

}  // namespace

EpochMetric::EpochMetric(ComputeFunction compute_fn, OutputTransform output_transform, bool check_compute_fn,
                         c10::Device device)
    : Metric(std::move(output_transform), device),
      compute_fn_(std::move(compute_fn)),
      check_compute_fn_(check_compute_fn) {
  KINDLING_CHECK(static_cast<bool>(compute_fn_), "kindling::metrics::EpochMetric: argument compute_fn is empty");
  register_state("_predictions", &predictions_, Reshard::kConcatenate);
  register_state("_targets", &targets_, Reshard::kConcatenate);
  reset();
}

void EpochMetric::reset() {
  predictions_.clear();
  targets_.clear();
}

void EpochMetric::update(const Value& output) {
  const std::string who = "kindling::metrics::" + name();
  auto [y_pred, y] = y_pred_and_y(output);
  KINDLING_CHECK(y_pred.dim() == 1 || y_pred.dim() == 2, who,
                 ": predictions should be of shape (batch_size, "
                 "n_targets) or (batch_size, ), but given ",
                 y_pred.sizes());
  KINDLING_CHECK(y.dim() == 1 || y.dim() == 2, who,
                 ": targets should be of shape (batch_size, n_targets) or "
                 "(batch_size, ), but given ",
                 y.sizes());
  auto prepare = [this](at::Tensor t) {
    t = t.detach();
    if (t.dim() == 2 && t.size(1) == 1) t = t.squeeze(1);
    return t.to(t.options().device(device()), /*non_blocking=*/false, /*copy=*/true);
  };
  y_pred = prepare(y_pred);
  y = prepare(y);
  check_input(y_pred, y);
  if (!predictions_.empty()) {
    const at::Tensor& p = predictions_.back();
    const at::Tensor& t = targets_.back();
    KINDLING_CHECK(p.scalar_type() == y_pred.scalar_type(), who,
                   ": incoherent types between input y_pred and "
                   "stored predictions: ",
                   p.scalar_type(), " vs ", y_pred.scalar_type());
    KINDLING_CHECK(t.scalar_type() == y.scalar_type(), who,
                   ": incoherent types between input y and stored "
                   "targets: ",
                   t.scalar_type(), " vs ", y.scalar_type());
    KINDLING_CHECK(same_columns(p, y_pred), who, ": incoherent shapes between input y_pred ", y_pred.sizes(),
                   " and stored predictions ", p.sizes(), "; every batch needs the same number of columns");
    KINDLING_CHECK(same_columns(t, y), who, ": incoherent shapes between input y ", y.sizes(), " and stored targets ",
                   t.sizes(), "; every batch needs the same number of columns");
  }
  predictions_.push_back(y_pred);
  targets_.push_back(y);
  if (check_compute_fn_ && predictions_.size() == 1) {
    try {
      compute_fn_(predictions_[0], targets_[0]);
    } catch (const std::exception& e) {
      kindling::log(LogLevel::kWarning, who + ": probably, there can be a problem with compute_fn: " + e.what());
    } catch (...) {
      kindling::log(LogLevel::kWarning, who +
                                            ": probably, there can be a problem with compute_fn: it threw "
                                            "something that is not a std::exception");
    }
  }
}

void EpochMetric::check_input(const at::Tensor&, const at::Tensor&) const {}

Value EpochMetric::compute() {
  const std::string who = "kindling::metrics::" + name();
  // One (predictions, targets) pair per rank holding samples, in rank order.
  std::vector<at::Tensor> preds, targets;
  if (!predictions_.empty()) {
    preds.push_back(at::cat(predictions_, 0));
    targets.push_back(at::cat(targets_, 0));
  }
  const int world = dist::get_world_size();
  if (world > 1) {
    // An object all-gather rather than a tensor one: shards differ in length, and a rank
    // that stored nothing knows neither the dtype nor the number of columns.
    std::vector<at::Tensor> mine;
    if (!preds.empty()) mine = {preds[0], targets[0]};
    const std::vector<std::vector<at::Tensor>> all = dist::all_gather_object(mine);
    preds.clear();
    targets.clear();
    for (const auto& shard : all) {
      if (shard.size() != 2 || shard[0].size(0) == 0) continue;  // a rank without samples
      preds.push_back(shard[0].to(device()));
      targets.push_back(shard[1].to(device()));
    }
  }
  // From here every rank holds the same shards, so every rank decides alike.
  int64_t total = 0;
  for (std::size_t i = 0; i < preds.size(); ++i) {
    total += preds[i].size(0);
    KINDLING_CHECK(
        preds[i].scalar_type() == preds[0].scalar_type() && targets[i].scalar_type() == targets[0].scalar_type(), who,
        ": the ranks stored different dtypes: predictions ", preds[0].scalar_type(), " and ", preds[i].scalar_type(),
        ", targets ", targets[0].scalar_type(), " and ", targets[i].scalar_type());
    KINDLING_CHECK(same_columns(preds[0], preds[i]) && same_columns(targets[0], targets[i]), who,
                   ": the ranks stored different shapes: predictions ", preds[0].sizes(), " and ", preds[i].sizes(),
                   ", targets ", targets[0].sizes(), " and ", targets[i].sizes());
  }
  if (total == 0) {
    throw NotComputableError(detail::rank_prefix() + who + " must have at least one example before it can be computed");
  }
  const at::Tensor y_pred = preds.size() == 1 ? preds[0] : at::cat(preds, 0);
  const at::Tensor y = targets.size() == 1 ? targets[0] : at::cat(targets, 0);
  if (world <= 1) return compute_fn_(y_pred, y);

  // compute_fn on rank 0 only; its result, or its failure, goes to every rank.
  const bool root = dist::get_rank() == 0;
  Value result;
  std::exception_ptr failure;
  std::optional<Wire> wire;
  if (root) {
    try {
      result = compute_fn_(y_pred, y);
      wire = to_wire(result);
    } catch (const std::exception& e) {
      failure = std::current_exception();
      const WireError type = dynamic_cast<const NotComputableError*>(&e) ? kWireNotComputable
                             : dynamic_cast<const UsageError*>(&e)       ? kWireUsageError
                                                                         : kWireError;
      wire = error_wire(e.what(), type);
    } catch (...) {
      failure = std::current_exception();
      wire = error_wire("it threw something that is not a std::exception");
    }
  }
  const Wire received = dist::broadcast_object<Wire>(wire, 0);
  if (failure) std::rethrow_exception(failure);
  if (root) return result;
  if (received.first < 0) {
    const std::string message =
        detail::rank_prefix() + who + ": compute_fn failed on rank 0: " + received.second.at(0).first;
    if (received.first == kWireNotComputable) throw NotComputableError(message);
    if (received.first == kWireUsageError) throw UsageError(message);
    throw Error(message);
  }
  return from_wire(received);
}

}  // namespace metrics
}  // namespace kindling
