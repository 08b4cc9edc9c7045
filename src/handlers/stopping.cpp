// TerminateOnNan and EarlyStopping.
#include "kindling/handlers/stopping.h"

#include <ATen/ATen.h>

#include <cmath>

#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {
namespace {

bool finite(const at::Tensor& t) {
  return !t.defined() || !t.is_floating_point() || at::isfinite(t).all().item<bool>();
}

bool finite(const engine::Value& v) {
  switch (v.kind()) {
    case engine::Value::Kind::kNone: return true;
    case engine::Value::Kind::kNumber: return std::isfinite(v.number());
    case engine::Value::Kind::kTensor: return finite(v.tensor());
    case engine::Value::Kind::kTuple:
      for (const auto& t : v.tuple_elements())
        if (!finite(t)) return false;
      return true;
    case engine::Value::Kind::kNamed:
      for (const auto& kv : v.named_elements())
        if (!finite(kv.second)) return false;
      return true;
  }
  return true;
}

}  // namespace

void TerminateOnNan::operator()(engine::Engine& engine) const {
  const engine::Value output = output_transform_ ? output_transform_(engine.state().output) : engine.state().output;
  if (finite(output)) return;
  log(LogLevel::kWarning, "TerminateOnNan: output '" + output.to_string() + "' of " + engine.name + " (iteration " +
                              std::to_string(engine.state().iteration) + ") contains NaN or Inf; stopping the run");
  engine.state().attributes[kStateKey] = engine::Value(static_cast<double>(engine.state().iteration));
  engine.terminate();
}

std::optional<int64_t> TerminateOnNan::ended_at(const engine::Engine& engine) {
  const auto& attributes = engine.state().attributes;
  const auto it = attributes.find(kStateKey);
  if (it == attributes.end() || !it->second.is_number()) return std::nullopt;
  return static_cast<int64_t>(it->second.number());
}

EarlyStopping::EarlyStopping(int patience, std::function<double(engine::Engine&)> score_function,
                             engine::Engine& trainer, double min_delta, bool cumulative_delta)
    : patience_(patience),
      score_function_(std::move(score_function)),
      trainer_(trainer),
      min_delta_(min_delta),
      cumulative_delta_(cumulative_delta) {
  KINDLING_CHECK(patience >= 1,
                 "kindling::handlers::EarlyStopping: argument patience should be a positive integer, "
                 "got ",
                 patience);
  KINDLING_CHECK(min_delta >= 0.0,
                 "kindling::handlers::EarlyStopping: argument min_delta should not be a negative "
                 "number, got ",
                 min_delta);
  KINDLING_CHECK(static_cast<bool>(score_function_), "kindling::handlers::EarlyStopping: the score function is empty");
}

void EarlyStopping::operator()(engine::Engine& engine) {
  const double score = score_function_(engine);
  if (!best_score_) {
    best_score_ = score;
    return;
  }
  if (score <= *best_score_ + min_delta_) {
    if (!cumulative_delta_ && score > *best_score_) best_score_ = score;
    ++counter_;
    log(LogLevel::kDebug, "EarlyStopping: " + std::to_string(counter_) + " / " + std::to_string(patience_));
    if (counter_ >= patience_) {
      log(LogLevel::kInfo, "EarlyStopping: stop training (no improvement above " + std::to_string(min_delta_) +
                               " for " + std::to_string(patience_) + " calls)");
      trainer_.terminate();
    }
  } else {
    best_score_ = score;
    counter_ = 0;
  }
}

StateDict EarlyStopping::state_dict() const {
  StateDict sd = new_state_dict();
  sd.insert("counter", static_cast<int64_t>(counter_));
  sd.insert("best_score", best_score_ ? c10::IValue(*best_score_) : c10::IValue());
  return sd;
}

void EarlyStopping::load_state_dict(const StateDict& state) {
  KINDLING_CHECK(state.contains("counter") && state.contains("best_score"),
                 "kindling::handlers::EarlyStopping::load_state_dict: expected the keys 'counter' and 'best_score'");
  counter_ = static_cast<int>(state.at("counter").toInt());
  const c10::IValue best = state.at("best_score");
  best_score_ = best.isNone() ? std::nullopt : std::optional<double>(best.toDouble());
}

}  // namespace handlers
}  // namespace kindling
