#pragma once
/// \file
/// Sharded checkpoint files: every rank of a sharded model (kindling/nn/sharding.h) writes its
/// own part of the weights and of the optimizer's state at once, and a later run loads them at
/// any world size (each rank reads the files one at a time and keeps their overlap with its
/// own part). For models whose whole state one rank cannot or should not gather; the whole
/// file that Python's torch.load reads as a module's state_dict stays kh::stateful(model) in a
/// Checkpoint.
///
/// \code
///   kindling::handlers::save_sharded("/ckpt/step-1000", *model.sharded(), &optimizer);
///   ...   // later, at any world size, the same model and optimizer built first
///   kindling::handlers::load_sharded("/ckpt/step-1000", *model.sharded(), &optimizer);
/// \endcode
///
/// The folder: `shard-<r>-of-<N>.pt`, rank r's ShardedModel::local_state_dict() in torch's
/// archive format, and `sharded-checkpoint.txt`, written by rank 0 once every rank's file is
/// in, naming the format and N. Each file is written atomically (a temporary file, fsync,
/// rename); the marker is removed before a save starts and written after it ends, so a save
/// that did not finish is never taken for a complete one. The folder must be one every rank
/// sees (a shared file system where ranks are on several hosts).

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>

#include "kindling/export.h"
#include "kindling/nn/sharding.h"

namespace kindling {
namespace handlers {

/// Writes `model`'s part on this rank (and `optimizer`'s state for it when given) into `folder`
/// (created when missing), every rank its own file, then rank 0 the marker. A collective over
/// the world: every rank calls it. Throws kindling::Error naming the rank and file a write
/// failed on (on every rank: the ranks agree before the marker is written, so none is left
/// waiting); kindling::UsageError for an optimizer not built on model.parameters();
/// TimeoutError / CommunicationError.
KINDLING_API void save_sharded(const std::string& folder, nn::ShardedModel& model,
                               const torch::optim::Optimizer* optimizer = nullptr);

/// Loads the complete save in `folder` (made at any world size) into `model` (and `optimizer`,
/// built on model.parameters(), when given). The next forward gathers the new weights. A
/// collective over the world: every rank calls it, and every rank fails when one does, before
/// anything changes on any rank (they agree once every rank read and checked its files):
/// kindling::UsageError for no complete save in the folder, a file missing or from another
/// save, another model's state; DamagedCheckpointError for a damaged file; the failing rank's
/// own error on that rank. An optimizer that refuses the saved options (another kind) fails
/// after that point, before it or the model changes.
KINDLING_API void load_sharded(const std::string& folder, nn::ShardedModel& model,
                               torch::optim::Optimizer* optimizer = nullptr);

/// The number of ranks of the complete save in `folder`, 0 when it holds none. Local.
KINDLING_API int64_t sharded_save_world(const std::string& folder);

}  // namespace handlers
}  // namespace kindling
