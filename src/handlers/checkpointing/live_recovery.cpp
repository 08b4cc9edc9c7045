// Live recovery, the training state's side (see kindling/handlers/checkpointing/live_recovery.h).
#include "kindling/handlers/checkpointing/live_recovery.h"

#include <utility>
#include <vector>

#include "kindling/dist/live.h"
#include "kindling/dist/replica_check.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "handlers/checkpointing/live_commits.h"

namespace kindling {
namespace handlers {

namespace {

constexpr char kLiveWho[] = "kindling::handlers::LiveRecovery";

// Thrown out of the engine at an iteration every rank agreed on: the launcher forms a new round.
struct NewRound : Error {
  NewRound() : Error(std::string(kLiveWho) + ": the launcher forms a new round") {}
};

}  // namespace

LiveRecovery::LiveRecovery(LiveRecoveryOptions options)
    : options_(std::move(options)), commits_(std::make_shared<detail::LiveCommits>()) {
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
                                std::to_string(commits_->iteration()));
    dist::rejoin(options_.backend(), options_.init_options(), why, options_.rejoin_timeout());
    ++recoveries_;
  }
}

int64_t LiveRecovery::committed_iteration() const { return commits_->iteration(); }

void LiveRecovery::keep(const Objects& objects, engine::Engine& engine) {
  commits_->restore(objects);
  const int64_t check = options_.check_every(), every = options_.commit_every();
  engine.add_event_handler(engine::Events::ITERATION_COMPLETED, [this, objects, check, every](engine::Engine& e) {
    const int64_t iteration = e.state().iteration;
    // Before the agreement: a peer lost in it leaves this iteration committed.
    if (iteration % every == 0) commits_->commit(objects, iteration);
    if (!dist::live_recovery_enabled() || iteration % check != 0) return;
    at::Tensor announced = at::full({1}, dist::new_round_announced() ? 1 : 0, at::kInt);
    dist::all_reduce(announced, dist::ReduceOp::kMax);
    if (announced.item<int>() == 0) return;
    if (commits_->iteration() != iteration) commits_->commit(objects, iteration);  // every rank is here: nothing redone
    throw NewRound();
  });
}

}  // namespace handlers
}  // namespace kindling
