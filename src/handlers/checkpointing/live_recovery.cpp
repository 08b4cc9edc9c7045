// Live recovery, the training state's side (see kindling/handlers/checkpointing/live_recovery.h).
#include "kindling/handlers/checkpointing/live_recovery.h"

#include <torch/serialize.h>

#include <cstring>
#include <utility>
#include <vector>

#include "kindling/dist/live.h"
#include "kindling/dist/replica_check.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/log.h"
#include "handlers/checkpointing/deep_copy.h"

namespace kindling {
namespace handlers {

namespace {

constexpr char kLiveWho[] = "kindling::handlers::LiveRecovery";

// Thrown out of the engine at an iteration every rank agreed on: the launcher forms a new round.
struct NewRound : Error {
  NewRound() : Error(std::string(kLiveWho) + ": the launcher forms a new round") {}
};

}  // namespace

LiveRecovery::LiveRecovery(LiveRecoveryOptions options) : options_(std::move(options)) {
  KINDLING_CHECK(options_.check_every() >= 1, kLiveWho, ": check_every must be at least 1, got ",
                 options_.check_every());
  KINDLING_CHECK(options_.commit_every() >= 1, kLiveWho, ": commit_every must be at least 1, got ",
                 options_.commit_every());
}

void LiveRecovery::run(const std::function<void(LiveRecovery&)>& train) {
  // A backend that cannot make a next world in this process (mpi) says why.
  const std::string no_new_world = dist::why_no_new_world(options_.backend());
  KINDLING_CHECK(no_new_world.empty() || !dist::live_recovery_enabled(), kLiveWho, ": backend '", options_.backend(),
                 "' cannot make a new world in the same process (", no_new_world, "); use backend 'gloo' for live "
                 "recovery, or run the ", options_.backend(), " job without --live_recovery and resume it from a "
                 "checkpoint");
  if (!dist::is_initialized()) dist::initialize(options_.backend(), options_.init_options());
  while (true) {
    std::string why;
    try {
      train(*this);
      return;
    } catch (const NewRound&) {
      why = "a new round was announced";
    } catch (const CommunicationError& e) {
      if (!dist::live_recovery_enabled()) throw;
      why = e.what();
    } catch (const TimeoutError& e) {
      if (!dist::live_recovery_enabled()) throw;
      why = e.what();
    } catch (const dist::ReplicaDivergedError& e) {
      // A diverged replica's host leaves, as a lost host would; the others make a world without
      // it (their request and its agent's end make the same round). No majority: every host leaves.
      if (!dist::live_recovery_enabled()) throw;
      if (e.diverged(dist::get_rank())) {
        dist::leave_job(e.what());
        throw;
      }
      why = e.what();
    }
    log(LogLevel::kWarning, std::string(kLiveWho) + ": rank " + std::to_string(dist::get_rank()) +
                                " leaves its world (" + why.substr(0, 200) + "); the last commit is of iteration " +
                                std::to_string(committed_iteration_));
    dist::rejoin(options_.backend(), options_.init_options(), why, options_.rejoin_timeout());
    ++recoveries_;
  }
}

void LiveRecovery::commit(const Objects& objects, int64_t iteration) {
  StateDict all = new_state_dict();
  for (const auto& [name, object] : objects) all.insert(name, object->state_dict());
  committed_ = ::kindling::detail::deep_copy(c10::IValue(all)).toGenericDict();
  committed_iteration_ = iteration;
}

void LiveRecovery::keep(const Objects& objects, engine::Engine& engine) {
  // Rank 0's commit (a survivor's: the rendezvous keeps the last round's members first) is every
  // rank's state: it includes every gradient of its iteration, as every rank sent its part.
  std::optional<at::Tensor> mine;
  if (dist::get_rank() == 0) {
    // A state loaded in an earlier world counts too: with commit_every > 1 a joined rank can be
    // rank 0 of the next world before its own first commit.
    const std::vector<char> bytes =
        committed_.size() > 0 ? torch::pickle_save(c10::IValue(committed_)) : std::vector<char>();
    mine = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::memcpy(mine->data_ptr(), bytes.data(), bytes.size());
  }
  const at::Tensor sent = dist::get_world_size() > 1 ? dist::broadcast(mine, 0) : *mine;
  if (sent.numel() > 0) {
    const std::vector<char> bytes(static_cast<const char*>(sent.data_ptr()),
                                  static_cast<const char*>(sent.data_ptr()) + sent.numel());
    const c10::IValue state = torch::pickle_load(bytes);
    KINDLING_CHECK(state.isGenericDict(), kLiveWho, ": the committed state is not a dict (", state.tagKind(), ")");
    Checkpoint::load_objects(objects, state.toGenericDict());
    committed_ = state.toGenericDict();  // unpickled: shares nothing with the objects
  }
  const int64_t check = options_.check_every(), every = options_.commit_every();
  engine.add_event_handler(engine::Events::ITERATION_COMPLETED, [this, objects, check, every](engine::Engine& e) {
    const int64_t iteration = e.state().iteration;
    // Before the agreement: a peer lost in it leaves this iteration committed.
    if (iteration % every == 0) commit(objects, iteration);
    if (!dist::live_recovery_enabled() || iteration % check != 0) return;
    at::Tensor announced = at::full({1}, dist::new_round_announced() ? 1 : 0, at::kInt);
    dist::all_reduce(announced, dist::ReduceOp::kMax);
    if (announced.item<int>() == 0) return;
    if (committed_iteration_ != iteration) commit(objects, iteration);  // every rank is here: nothing redone
    throw NewRound();
  });
}

}  // namespace handlers
}  // namespace kindling
