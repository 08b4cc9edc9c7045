#pragma once
/// \file
/// Live recovery: training that survives a lost host, and takes in a new one, without
/// restarting any process or reading a checkpoint from disk (kindling-run --live_recovery).
/// The training state is committed in memory after every iteration; when a rank or host is lost
/// (a collective fails) or a node arrives (the launcher announces a new round, which the ranks
/// agree to leave at the same iteration), every surviving process makes the new world itself
/// (kindling/dist/live.h), the state of the lowest rank is sent to every rank, new ones
/// included, and training goes on from there at the new world size (the data position
/// converted as for a resume at another world size).
///
/// \code
///   kh::LiveRecovery live(kh::LiveRecoveryOptions().init_options(kd::InitOptions().timeout(60s)));
///   torch::nn::Linear net(3, 1);                          // lives across worlds
///   live.run([&](kh::LiveRecovery& self) {                // once per world
///     auto model = kd::auto_model(net);                   // what depends on the world
///     auto loader = kd::auto_dataloader(dataset, options);
///     torch::optim::SGD optimizer(model->parameters(), 0.1);
///     auto trainer = ke::create_supervised_trainer(model, optimizer, loss);
///     self.keep({{"model", kh::stateful(net)}, {"optimizer", kh::stateful(optimizer)},
///                {"trainer", kh::stateful(trainer)}}, trainer);
///     trainer.run(loader, epochs);
///   });
/// \endcode
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/engine/engine.h"
#include "kindling/export.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {
namespace detail {
class LiveCommits;
}

struct KINDLING_API LiveRecoveryOptions {
  /// The backend of every world run() makes. Default: gloo.
  KINDLING_ARG(std::string, backend) = "gloo";
  /// Its options (a short timeout makes a lost host found sooner). Default: initialize()'s.
  KINDLING_ARG(dist::InitOptions, init_options);
  /// Whether a new round was announced is agreed every this many iterations (one all_reduce of
  /// one number). Default: 1.
  KINDLING_ARG(int64_t, check_every) = 1;
  /// The state is committed after every this many iterations, and before a world is left for
  /// an announced round (every rank then at the same iteration). A commit copies the state
  /// dict of every kept object (bench_engine's LiveCommit: the cost for an MLP and a
  /// ResNet-18); after a lost host up to this many iterations are redone. Default: 1.
  KINDLING_ARG(int64_t, commit_every) = 1;
  /// How long a rank waits for the launcher's next round. Default: 10 minutes.
  KINDLING_ARG(std::chrono::milliseconds, rejoin_timeout) = std::chrono::minutes(10);
};

class KINDLING_API LiveRecovery {
 public:
  explicit LiveRecovery(LiveRecoveryOptions options = LiveRecoveryOptions());

  /// Initializes the world (unless it is), then runs `train` until it returns. When it throws
  /// kindling::CommunicationError or kindling::TimeoutError (a rank or host was lost) or the
  /// launcher announces a new round, the next world is made in this process
  /// (kindling::dist::rejoin) and `train` runs again; it builds what depends on the world (DDP,
  /// loaders, engines) and calls keep(). kindling::dist::ReplicaDivergedError (a replica that
  /// kindling::handlers::ReplicaCheck found diverged) is a lost host too: on the diverged ranks
  /// run() tells the launcher that their node leaves the job (kindling::dist::leave_job) and
  /// rethrows, the others make the next world without it (every rank leaves when no majority
  /// was found). Other exceptions leave run(). Without
  /// `kindling-run --live_recovery` `train` runs once and its errors leave run(). Every rank
  /// calls it. Throws what `train` and rejoin() throw; kindling::UsageError for backend "mpi"
  /// under live recovery (MPI cannot make a second world in one process).
  void run(const std::function<void(LiveRecovery&)>& train);

  /// Inside `train`, after the engine's own handlers are attached: loads the last committed
  /// state into `objects` on every rank (sent by the lowest rank that has it; nothing on the
  /// job's first world), then commits `objects` after every commit_every of `engine`'s
  /// iterations and agrees there every check_every iterations whether a new round was announced.
  /// A metric among `objects` makes every commit a collective (its state gathers every rank's).
  /// A sharded model (kh::stateful(model)) and its optimizer (kh::stateful(optimizer, model))
  /// are committed by parts: each rank keeps its own part and a copy of one other rank's (the
  /// same local rank on the next node), so a commit sends each rank's part once over the
  /// network and ends with one all_reduce; a new world gets every part from a rank that kept it
  /// (kindling::UsageError on every rank when a part was lost with its copy: two neighbouring
  /// nodes lost between two commits). Every rank calls it.
  void keep(const Objects& objects, engine::Engine& engine);

  /// Worlds made in this process after the first (recoveries and joins seen by this rank).
  int recoveries() const { return recoveries_; }
  /// The iteration of the last commit (-1 before the first).
  int64_t committed_iteration() const;

 private:
  LiveRecoveryOptions options_;
  std::shared_ptr<detail::LiveCommits> commits_;  // the kept objects' states, copies of their tensors
  int recoveries_ = 0;
};

}  // namespace handlers
}  // namespace kindling
