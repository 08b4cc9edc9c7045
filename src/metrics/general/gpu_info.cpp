// GpuInfo: NVML's memory and utilization figures per GPU. NVML's functions are declared here and
// looked up with dlsym: NVML ships with the NVIDIA driver, not as a Debian development package
// kindling could link, and a machine without a driver must still load libkindling.
#include "kindling/metrics/gpu_info.h"

#include <dlfcn.h>

#include <ATen/ATen.h>

#include <map>
#include <set>
#include <string>

#include "kindling/engine/engine.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace metrics {
namespace {

const char* const kGpuWho = "kindling::metrics::GpuInfo";

}  // namespace

struct GpuInfo::Library {
  // The few NVML types used (nvml.h of the driver's API: nvmlReturn_t, nvmlDevice_t,
  // nvmlMemory_t, nvmlUtilization_t).
  using NvmlReturn = int;  // 0 is NVML_SUCCESS
  using NvmlDevice = void*;
  struct NvmlMemory {
    unsigned long long total, free, used;  // bytes
  };
  struct NvmlUtilization {
    unsigned int gpu, memory;  // percent over the last sample period
  };

  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*count)(unsigned int*) = nullptr;
  NvmlReturn (*device)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  const char* (*error)(NvmlReturn) = nullptr;
  std::set<unsigned int> warned;  // GPUs whose missing figure was told

  std::string text(NvmlReturn code) const { return error ? error(code) : "error " + std::to_string(code); }
  ~Library() {
    if (shutdown) shutdown();
    if (handle) dlclose(handle);
  }
};

namespace {

template <typename F>
void look_up(void* handle, const char* symbol, F*& out) {
  out = reinterpret_cast<F*>(dlsym(handle, symbol));
  KINDLING_CHECK(out != nullptr, kGpuWho, ": the NVIDIA management library has no ", symbol,
                 "; the driver is too old for kindling's GpuInfo");
}

}  // namespace

GpuInfo::GpuInfo() : Metric(OutputTransform(), c10::Device(c10::kCPU)), nvml_(std::make_shared<Library>()) {
  Library& l = *nvml_;
  l.handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  KINDLING_CHECK(l.handle != nullptr, kGpuWho, ": there is no NVIDIA driver here (libnvidia-ml.so.1: ", dlerror(),
                 "); GpuInfo reports NVIDIA GPUs and needs their driver, as ignite's does");
  look_up(l.handle, "nvmlInit_v2", l.init);
  look_up(l.handle, "nvmlShutdown", l.shutdown);
  look_up(l.handle, "nvmlDeviceGetCount_v2", l.count);
  look_up(l.handle, "nvmlDeviceGetHandleByIndex_v2", l.device);
  look_up(l.handle, "nvmlDeviceGetMemoryInfo", l.memory);
  look_up(l.handle, "nvmlDeviceGetUtilizationRates", l.utilization);
  look_up(l.handle, "nvmlErrorString", l.error);
  const Library::NvmlReturn started = l.init();
  if (started != 0) l.shutdown = nullptr;  // nothing to shut down
  KINDLING_CHECK(started == 0, kGpuWho, ": NVML did not start: ", l.text(started));
  unsigned int gpus = 0;
  const Library::NvmlReturn counted = l.count(&gpus);
  KINDLING_CHECK(counted == 0 && gpus > 0, kGpuWho, ": NVML sees no GPU (",
                 counted == 0 ? "0 devices" : l.text(counted), "); GpuInfo needs an NVIDIA GPU");
}

GpuInfo::~GpuInfo() = default;

Value GpuInfo::compute() {
  Library& l = *nvml_;
  unsigned int gpus = 0;
  const Library::NvmlReturn counted = l.count(&gpus);
  KINDLING_CHECK_T(Error, counted == 0, kGpuWho, ": NVML could not count the GPUs: ", l.text(counted));
  std::map<std::string, at::Tensor> out;
  for (unsigned int i = 0; i < gpus; ++i) {
    Library::NvmlDevice device = nullptr;
    Library::NvmlMemory memory{};
    Library::NvmlUtilization utilization{};
    const Library::NvmlReturn found = l.device(i, &device);
    const Library::NvmlReturn mem = found == 0 ? l.memory(device, &memory) : found;
    const Library::NvmlReturn util = found == 0 ? l.utilization(device, &utilization) : found;
    if (mem == 0 && memory.total > 0) {
      out[std::to_string(i) + " mem(%)"] =
          at::scalar_tensor(static_cast<double>(memory.used * 100 / memory.total), at::kDouble);
    }
    if (util == 0)
      out[std::to_string(i) + " util(%)"] = at::scalar_tensor(static_cast<double>(utilization.gpu), at::kDouble);
    if ((mem != 0 || util != 0) && l.warned.insert(i).second) {
      std::string missing;  // appended: GCC 12 warns falsely on "..." + std::string chains in C++20
      if (mem != 0) missing.append("memory figure (").append(l.text(mem)).append(")");
      if (mem != 0 && util != 0) missing.append(" and no ");
      if (util != 0) missing.append("utilization (").append(l.text(util)).append(")");
      kindling::log(LogLevel::kWarning, std::string(kGpuWho) + ": GPU " + std::to_string(i) + " gives no " + missing +
                                            "; left out (told once per GPU)");
    }
  }
  return Value::named(std::move(out));
}

void GpuInfo::attach_at(engine::Engine& engine, const std::string& name, const engine::Event& event) {
  KINDLING_CHECK(!name.empty(), kGpuWho, "::attach: the name must not be empty (ignite's default is \"gpu\")");
  std::shared_ptr<Metric> self = engine::keep_alive(*this, kGpuWho);
  engine.on(event, [self, name](engine::Engine& e) {
    const Value values = self->compute();  // kept: the loop reads its entries
    for (const auto& [key, value] : values.named_elements()) {
      e.state().metrics[name + ":" + key] = Value(value.item<double>());
    }
  });
}

void GpuInfo::attach(engine::Engine& engine, const std::string& name, const Usage&) { attach_at(engine, name); }

}  // namespace metrics
}  // namespace kindling
