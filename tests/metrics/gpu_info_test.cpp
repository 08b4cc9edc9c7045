// GpuInfo (kindling/metrics/gpu_info.h) as this machine allows: without an NVIDIA driver it is
// refused with the reason; with one (a GPU session), each GPU's "gpu:<i> mem(%)" and
// "gpu:<i> util(%)" reach the engine's metrics at each iteration, whole numbers from 0 to 100.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <memory>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/error.h"
#include "kindling/metrics/gpu_info.h"
#include "support/errors.h"

namespace gpu_info_test {

namespace km = kindling::metrics;
using kindling::engine::Engine;
using kindling::engine::Value;

bool has_nvidia_driver() {
  void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle) dlclose(handle);
  return handle != nullptr;
}

TEST(GpuInfoTest, ReportsEachGpuOrSaysWhyItCannot) {
  if (!has_nvidia_driver()) {
    const std::string message = kindling::testing::error_of<kindling::UsageError>([] { km::GpuInfo gpu; });
    EXPECT_NE(message.find("GpuInfo: there is no NVIDIA driver here (libnvidia-ml.so.1: "), std::string::npos)
        << message;
    return;
  }
  auto gpu = std::make_shared<km::GpuInfo>();
  Engine trainer([](Engine&, const int&) { return Value(0.0); });
  gpu->attach_at(trainer, "gpu");
  trainer.run(std::vector<int>(2, 0), 1);
  const auto& metrics = trainer.state().metrics;
  ASSERT_TRUE(metrics.count("gpu:0 mem(%)")) << "GPU 0 gave no memory figure";
  for (const auto& [name, value] : metrics) {
    EXPECT_EQ(name.rfind("gpu:", 0), 0u) << name;
    EXPECT_GE(value.number(), 0) << name;
    EXPECT_LE(value.number(), 100) << name;
    EXPECT_EQ(value.number(), static_cast<double>(static_cast<int64_t>(value.number()))) << name << ": a whole number";
  }
}

}  // namespace gpu_info_test
