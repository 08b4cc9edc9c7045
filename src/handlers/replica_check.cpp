// ReplicaCheck: kindling::dist::check_replicas every N iterations of an engine, the message
// saying between which iterations the replicas came apart.
#include "kindling/handlers/replica_check.h"

#include <torch/nn/module.h>

#include <string>
#include <utility>

#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {

namespace {
constexpr char kReplicaCheckWho[] = "kindling::handlers::ReplicaCheck";
}  // namespace

ReplicaCheck::ReplicaCheck(std::shared_ptr<torch::nn::Module> module, dist::ReplicaCheckOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  KINDLING_CHECK(module_ != nullptr, kReplicaCheckWho,
                 ": the module is null; pass the module whose replicas to compare (net.ptr(), or model.module() "
                 "of a DDP model)");
}

void ReplicaCheck::operator()(engine::Engine& engine) {
  const int64_t iteration = engine.state().iteration;
  std::string context = "at iteration " + std::to_string(iteration) + " of " + engine.name;
  context += last_equal_ >= 0 ? " (they were equal at iteration " + std::to_string(last_equal_) + ", the last check)"
                              : " (the first check)";
  ++checks_;
  dist::check_replicas(*module_, dist::ReplicaCheckOptions(options_).context(context));
  last_equal_ = iteration;
}

engine::HandlerHandle ReplicaCheck::attach(engine::Engine& engine, int64_t every) {
  KINDLING_CHECK(every >= 1, kReplicaCheckWho, ".attach: every should be >= 1 iteration, got ", every,
                 "; the default is ", kDefaultEvery, " (a divergence is found within that many iterations)");
  std::shared_ptr<ReplicaCheck> self = engine::keep_alive(*this, kReplicaCheckWho);
  return engine.add_event_handler(engine::Events::ITERATION_COMPLETED.every(every),
                                  [self](engine::Engine& e) { (*self)(e); });
}

}  // namespace handlers
}  // namespace kindling
