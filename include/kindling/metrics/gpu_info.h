#pragma once
/// \file
/// kindling::metrics::GpuInfo: ignite's GpuInfo, the memory use and utilization of each GPU of
/// this host, read from NVIDIA's management library (NVML, part of the driver) at each event
/// and stored in the engine's metrics as "<name>:<i> mem(%)" (used memory, percent of total,
/// truncated to an integer) and "<name>:<i> util(%)" (the GPU's utilization over the driver's
/// last sample period), as ignite stores them.
///
/// \code
///   auto gpu = std::make_shared<kindling::metrics::GpuInfo>();   // throws without an NVIDIA GPU
///   gpu->attach(trainer, "gpu");                                  // ITERATION_COMPLETED by default
///   // trainer.state().metrics.at("gpu:0 mem(%)").number()
/// \endcode
///
/// NVML is loaded when a GpuInfo is made (libnvidia-ml.so.1, dlopen), so kindling builds and
/// runs on machines without a driver; there the constructor throws. Ranks: local, nothing is
/// communicated; each rank reads every GPU of its host (as ignite's nvidia-smi query does).

#include <string>

#include "kindling/engine/events.h"
#include "kindling/export.h"
#include "kindling/metrics/metric.h"

namespace kindling {
namespace metrics {

class KINDLING_API GpuInfo : public Metric {
 public:
  /// Loads NVML and checks that it sees a GPU. Throws kindling::UsageError when there is no
  /// NVIDIA driver (libnvidia-ml.so.1 cannot be loaded: the message says why) or it reports no
  /// GPU; ignite's GpuInfo fails there too ("requires available GPU").
  GpuInfo();
  ~GpuInfo() override;
  /// Nothing to reset or accumulate (the values are read at each event).
  void reset() override {}
  void update(const Value&) override {}
  /// Each GPU's "<i> mem(%)" and "<i> util(%)" as named 0-dim float64 tensors (whole numbers).
  /// A value NVML does not give (e.g. utilization on some GPUs) is left out with one warning
  /// per GPU. Throws kindling::Error when NVML fails to list the GPUs. Local.
  Value compute() override;
  std::string name() const override { return "GpuInfo"; }

  /// ignite's attach(engine, name="gpu", event_name=ITERATION_COMPLETED): at each `event`, the
  /// values of compute() go to engine.state().metrics as "<name>:<i> mem(%)" and
  /// "<name>:<i> util(%)". Throws kindling::UsageError for an empty name.
  void attach_at(engine::Engine& engine, const std::string& name = "gpu",
                 const engine::Event& event = engine::Events::ITERATION_COMPLETED);
  /// attach_at(engine, name) for the usages' own events is not meaningful (nothing
  /// accumulates): this attaches at ITERATION_COMPLETED whatever `usage` says.
  void attach(engine::Engine& engine, const std::string& name, const Usage& usage = Usage::kEpochWise) override;

 private:
  struct Library;
  std::shared_ptr<Library> nvml_;
};

}  // namespace metrics
}  // namespace kindling
