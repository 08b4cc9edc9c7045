#pragma once
/// \file
/// kindling::handlers::FBResearchLogger: ignite's FBResearchLogger, progress lines in the style
/// of Facebook research code, written through a setup_logger Logger:
///
///   trainer INFO: Train: start epoch [1/4]
///   trainer INFO: Epoch [1/4]  [20/100]:  ETA: 0:00:03  lr: 0.00100  total_loss: 1.5999  Iter time: 0.0008 s  Data
///   prep time: 0.0001 s trainer INFO: Train: Epoch [1/4]  Total time: 0:00:00  (0.0009 s / it) trainer INFO: Train:
///   run completed  Total time: 0:00:01
///
/// \code
///   auto logger = kindling::handlers::setup_logger("trainer");
///   kindling::handlers::FBResearchLogger fb(logger, "  ", /*show_output=*/true);
///   fb.attach(trainer, "Train", /*every=*/20, {}, {}, &optimizer);
/// \endcode
///
/// The fields as ignite writes them: the iteration within the epoch, the ETA of the epoch from
/// the average iteration time (Python's timedelta text, "1 day, 2:03:04"), each learning rate
/// with 5 decimals ("lr: 0.10000" for one group, else "lr [g0]: ...lr [g1]: ..." run together as
/// ignite writes them), the output when show_output (through output_transform; numbers with 4
/// decimals, named values as "key: value" in key order, a tuple as "a, b", a 1-dim tensor as
/// "[a, b, ...]" of at most 10 elements, others as "Shape[2, 3]"; a lone tensor is written as
/// in a tuple, where ignite writes nothing), the state attributes ("name: value", "name: " when
/// missing), the average iteration and data-preparation times, and "GPU Max Mem: N MB" of the
/// current CUDA device where CUDA is available on LibTorch 2.x (left out on 1.13, whose
/// allocator has no device-generic statistics). The epoch line and the run line are ignite's
/// (the run line only with max_epochs > 1).
///
/// Ranks: the lines go through `logger`, which writes on rank 0 only (setup_logger's rule);
/// the handlers run on every rank and do not communicate.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/export.h"
#include "kindling/handlers/loggers/setup_logger.h"
#include "kindling/metrics/metric.h"

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace kindling {
namespace handlers {

class KINDLING_API FBResearchLogger {
 public:
  /// `delimiter` goes between the fields; `show_output` adds the engine's output to the
  /// iteration lines. Local; does not throw.
  explicit FBResearchLogger(Logger logger, std::string delimiter = "  ", bool show_output = false);

  /// Attaches the lines to `engine` (the handlers keep what they need: this object may go
  /// before the engine): "start epoch" at EPOCH_STARTED, the iteration line every
  /// `every` iterations (ITERATION_COMPLETED), the epoch line at EPOCH_COMPLETED, the run line at
  /// COMPLETED, and two average timers (iterations, batch preparation) restarted each epoch.
  /// `optimizer`, when given, must outlive the engine's handlers. Throws kindling::UsageError
  /// for every < 1. Call it on every rank (the Logger decides who writes).
  void attach(engine::Engine& engine, const std::string& name, int64_t every = 1,
              metrics::OutputTransform output_transform = {}, std::vector<std::string> state_attributes = {},
              torch::optim::Optimizer* optimizer = nullptr);

  /// ignite's utils._to_str_list of an output, as the iteration line writes it (see above).
  /// Local; does not throw.
  static std::vector<std::string> output_fields(const engine::Value& output);
  /// Python's str(datetime.timedelta(seconds=int(seconds))): "0:00:05", "1 day, 0:00:00".
  static std::string timedelta_text(double seconds);

  /// Internal: what the handlers share (they outlive this object if the engine does).
  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace handlers
}  // namespace kindling
