// --profile: where a training iteration's time goes on this rank, for bench/cifar10's
// comparison with ignite (bench/cifar10/train_ignite.py --profile splits its iterations the
// same way): waiting for the batch, forward (loss included), backward (without the wait
// below), waiting for DDP's all-reduces after the last gradient, the optimizer step, and the
// whole iteration from one batch request to the next.
#pragma once

#include <kindling/engine/engine.h>
#include <kindling/engine/supervised.h>
#include <kindling/nn/ddp.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace cifar10 {

/// Collects the marks of each iteration and keeps the parts' durations (ms).
class IterationSplit {
 public:
  using Clock = std::chrono::steady_clock;

  /// Marks batch requests and iteration starts on `trainer`; `reducer` (null with one rank)
  /// gives the all-reduce wait. Call once, before the run.
  void attach(kindling::engine::Engine& trainer, const kindling::nn::GradientReducer* reducer);
  /// `criterion`, marking the end of the forward when called and the start of backward when
  /// it returns.
  kindling::engine::LossFunction timed(kindling::engine::LossFunction criterion);
  /// Called by TimedSGD around its step.
  void step_started() { step_start_ = Clock::now(); }
  void step_ended();
  /// The median of each part over the iterations, in ms ({} before the first iteration).
  std::map<std::string, double> medians() const;

 private:
  const kindling::nn::GradientReducer* reducer_ = nullptr;
  Clock::time_point fetch_, start_, forward_end_, backward_start_, step_start_;
  bool have_fetch_ = false;
  std::map<std::string, std::vector<double>> parts_;
};

/// SGD whose step() reports its start and end to an IterationSplit.
class TimedSGD : public torch::optim::SGD {
 public:
  TimedSGD(std::vector<at::Tensor> params, const torch::optim::SGDOptions& options, std::shared_ptr<IterationSplit> split)
      : torch::optim::SGD(std::move(params), options), split_(std::move(split)) {}
  at::Tensor step(LossClosure closure = nullptr) override;

 private:
  std::shared_ptr<IterationSplit> split_;
};

/// `{"data": 12.3, ...}`: the medians as a JSON object, for summary.json.
std::string to_json(const std::map<std::string, double>& medians);

}  // namespace cifar10
