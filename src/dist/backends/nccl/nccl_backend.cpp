#include "dist/backends/nccl/nccl_backend.h"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "dist/backends/c10d/c10d_backend.h"
#include "dist/backends/c10d/c10d_compat.h"
#include "dist/rendezvous/rendezvous.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {

std::unique_ptr<Backend> make_nccl_backend(const WorldConfig& config) {
  const int gpus = static_cast<int>(c10::cuda::device_count());
  const int local = config.local_rank.value_or(config.world_size == 1 ? 0 : config.rank);
  KINDLING_CHECK(gpus > 0,
                 "kindling::dist::initialize(\"nccl\"): nccl backend is required but no cuda capable devices "
                 "are visible (CUDA_VISIBLE_DEVICES='",
                 std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>",
                 "'); use the gloo backend on CPU");
  KINDLING_CHECK(local < gpus, ::kindling::detail::rank_prefix(), "kindling::dist::initialize(\"nccl\"): local rank ",
                 local, " needs GPU cuda:", local, " but this node shows ", gpus,
                 " CUDA device(s). NCCL gives each rank its own GPU: start at most ", gpus,
                 " processes per node, or use gloo, which lets ranks share a GPU");
  const c10::Device gpu(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(local));
  c10::cuda::set_device(gpu.index());
  enable_nccl_async_errors();

  const auto timeout = config.timeout;
  return start_c10d_world(nccl_traits(), config, /*monitor=*/false, [timeout, gpu]() -> ProcessGroupFactory {
    return [timeout, gpu](c10::intrusive_ptr<c10d::Store> s, int rank, int size, const std::string& name) {
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = timeout;
      auto engine = c10::make_intrusive<c10d::ProcessGroupNCCL>(engine_store(s, "cuda"), rank, size, opts);
      return as_process_group(engine, s, "nccl", EngineDevices{false, true}, name, gpu);
    };
  });
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
