// The cifar10 example's --profile split of training iterations.
#include "profile.h"

#include <algorithm>
#include <cstdio>

namespace cifar10 {

namespace {

double ms(IterationSplit::Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

void IterationSplit::attach(kindling::engine::Engine& trainer, const kindling::nn::GradientReducer* reducer) {
  using kindling::engine::Events;
  reducer_ = reducer;
  trainer.on(Events::GET_BATCH_STARTED, [this](kindling::engine::Engine&) {
    const auto now = Clock::now();
    if (have_fetch_) parts_["iteration"].push_back(ms(now - fetch_));
    fetch_ = now;
    have_fetch_ = true;
  });
  trainer.on(Events::ITERATION_STARTED, [this](kindling::engine::Engine&) {
    start_ = Clock::now();
    parts_["data"].push_back(ms(start_ - fetch_));
  });
  // A new epoch's first request follows the previous epoch's handlers (validation): not an iteration.
  trainer.on(Events::EPOCH_STARTED, [this](kindling::engine::Engine&) { have_fetch_ = false; });
}

kindling::engine::LossFunction IterationSplit::timed(kindling::engine::LossFunction criterion) {
  return [this, criterion = std::move(criterion)](const at::Tensor& y_pred, const at::Tensor& y) {
    at::Tensor loss = criterion(y_pred, y);
    // Only the trainer's calls: evaluators compute their Loss metric outside a training iteration.
    if (at::GradMode::is_enabled()) {
      forward_end_ = Clock::now();
      backward_start_ = forward_end_;
      parts_["forward"].push_back(ms(forward_end_ - start_));
    }
    return loss;
  };
}

void IterationSplit::step_ended() {
  const auto now = Clock::now();
  const double wait = reducer_ ? 1000.0 * reducer_->last_sync_wait_seconds() : 0.0;
  parts_["backward"].push_back(ms(step_start_ - backward_start_) - wait);
  parts_["allreduce_wait"].push_back(wait);
  parts_["optimizer"].push_back(ms(now - step_start_));
}

std::map<std::string, double> IterationSplit::medians() const {
  std::map<std::string, double> out;
  for (auto [name, values] : parts_) {
    if (values.empty()) continue;
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    out[name] = values[values.size() / 2];
  }
  return out;
}

at::Tensor TimedSGD::step(LossClosure closure) {
  split_->step_started();
  at::Tensor result = torch::optim::SGD::step(std::move(closure));
  split_->step_ended();
  return result;
}

std::string to_json(const std::map<std::string, double>& medians) {
  std::string out = "{";
  for (const auto& [name, value] : medians) {
    char number[48];
    std::snprintf(number, sizeof(number), "%.4g", value);
    out += (out.size() > 1 ? ", \"" : "\"") + name + "\": " + number;
  }
  return out + "}";
}

}  // namespace cifar10
