// Resuming a run whose data is sharded among another number of ranks than when its state was
// saved (an elastic restart at a new world size): the position in the epoch is kept as a number
// of samples of the epoch's global order, not as a per-rank batch index.
//
// Why a sample count carries over: kindling's distributed samplers give rank r the positions
// r, r + N, r + 2N, ... of one global order, which does not depend on N. With b samples per
// rank and batch, the k-th batches of the N ranks together are the block [kNb, (k + 1)Nb) of
// that order, so after k iterations of a global batch B the epoch has consumed its first kB
// positions at any world size. With the global batch kept, iterations per epoch stay
// ceil(n / B) for every N dividing B, and nothing changes; with another global batch B', the
// run goes on from iteration kB / B' of the epoch when that is whole.
#include "kindling/engine/engine.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace engine {
namespace {

std::string describe_sharding(const detail::Sharding& s) {
  return std::to_string(s.replicas) + (s.replicas == 1 ? " rank" : " ranks") + " taking " +
         std::to_string(s.samples_per_iteration) + " samples per iteration";
}

}  // namespace

std::optional<detail::Sharding> Engine::read_sharding(const StateDict& sd, const std::string& where) {
  if (!sd.contains("data_sharding")) return std::nullopt;
  const c10::IValue& v = sd.at("data_sharding");
  KINDLING_CHECK(v.isIntList() && v.toIntList().size() == 2, where,
                 ": 'data_sharding' should be a list of 2 integers (replicas, samples per iteration), got a ",
                 v.tagKind());
  const auto list = v.toIntList();
  KINDLING_CHECK(list.get(0) >= 1 && list.get(1) >= 1, where, ": 'data_sharding' should hold positive numbers, got (",
                 list.get(0), ", ", list.get(1), ")");
  return detail::Sharding{list.get(0), list.get(1)};
}

void Engine::reshard_position(const detail::Sharding& now, std::optional<int64_t> data_epoch_length,
                              const std::string& where) {
  const detail::Sharding was = *sharding_;
  const std::string change =
      "the state was saved by " + describe_sharding(was) + ", this run has " + describe_sharding(now);
  const int64_t len = state_.epoch_length.value_or(0);
  if (was.samples_per_iteration == now.samples_per_iteration) {
    KINDLING_CHECK(!data_epoch_length || !state_.epoch_length || *data_epoch_length == len, where, ": ", change,
                   " (the same global batch), but an epoch of the data has ", data_epoch_length.value_or(0),
                   " iterations against ", len,
                   " in the state; a dataset of another size, or drop_last, which drops a different tail at each "
                   "world size? Resume on the same dataset without drop_last");
    log(LogLevel::kInfo, name + ": resuming at iteration " + std::to_string(state_.iteration) + ": " + change +
                             ", the same global batch, so the epoch goes on at the same sample");
    return;
  }
  // Another global batch: the iterations are converted through the samples consumed.
  const std::string advice =
      ". Keep the global batch instead (auto_dataloader's batch_size is the global batch and is divided "
      "among the ranks; it must be a multiple of every world size the job may run at)";
  KINDLING_CHECK(!state_.max_iters, where, ": ", change,
                 ", but the run is bounded by max_iters, which counts iterations of the old size", advice,
                 ", or bound it by max_epochs");
  KINDLING_CHECK(origin_.iteration == 0 && origin_.epoch == 0 && origin_.pass == 0, where, ": ", change,
                 ", but the state was saved after terminate_epoch() restarted the data mid-way", advice);
  KINDLING_CHECK(len > 0 && data_epoch_length && *data_epoch_length > 0, where, ": ", change,
                 ", but the number of iterations per epoch is unknown (", len, " in the state, ",
                 data_epoch_length.value_or(0), " in the data)", advice);
  const int64_t epoch = state_.iteration / len, done = state_.iteration % len;
  const int64_t consumed = done * was.samples_per_iteration;
  KINDLING_CHECK(consumed % now.samples_per_iteration == 0, where, ": ", change, ". Epoch ", epoch + 1,
                 " stopped after ", done, " iterations, ", consumed,
                 " samples, which is not a whole number of iterations of ", now.samples_per_iteration, " samples",
                 advice, ", or resume from a checkpoint saved at the end of an epoch");
  const int64_t iteration = epoch * *data_epoch_length + consumed / now.samples_per_iteration;
  log(LogLevel::kWarning,
      name + ": " + change + ": the global batch changed, so an epoch has " + std::to_string(*data_epoch_length) +
          " iterations instead of " + std::to_string(len) + "; resuming at sample " + std::to_string(consumed) +
          " of epoch " + std::to_string(epoch + 1) + " (iteration " + std::to_string(iteration) + ", was " +
          std::to_string(state_.iteration) + "). Learning rates and schedules that count iterations are not rescaled");
  state_.iteration = iteration;
  state_.epoch_length = data_epoch_length;
  state_.epoch = epoch;
}

}  // namespace engine
}  // namespace kindling
