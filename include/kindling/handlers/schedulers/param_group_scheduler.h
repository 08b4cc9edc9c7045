#pragma once
/// \file
/// ParamGroupScheduler (ignite's): several parameter schedulers stepped together, typically one
/// per parameter group of an optimizer (a backbone and a head on their own schedules), with
/// one state_dict for all.
///
/// \code
///   namespace kh = kindling::handlers;
///   auto backbone = std::make_shared<kh::PiecewiseLinear>(opt, "lr", points_a, false, 0);  // group 0
///   auto head = std::make_shared<kh::PiecewiseLinear>(opt, "lr", points_b, false, 1);      // group 1
///   auto both = std::make_shared<kh::ParamGroupScheduler>(
///       std::vector<std::shared_ptr<kh::ParamScheduler>>{backbone, head}, std::vector<std::string>{"backbone",
///       "head"});
///   both->attach(trainer);
/// \endcode
///
/// Ranks: local, as the schedulers it holds.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/export.h"
#include "kindling/handlers/schedulers/param_scheduler.h"

namespace kindling {
namespace handlers {

class KINDLING_API ParamGroupScheduler : public std::enable_shared_from_this<ParamGroupScheduler> {
 public:
  /// `names`: one per scheduler (empty: their param_name()s); every scheduler's save_history is
  /// set to `save_history`. Throws kindling::UsageError for no scheduler, a null one, or a
  /// number of names other than of schedulers.
  ParamGroupScheduler(std::vector<std::shared_ptr<ParamScheduler>> schedulers, std::vector<std::string> names = {},
                      bool save_history = false);

  /// Each scheduler's step(), in order. Local.
  void step();
  /// step(); for engine.on(event, ...).
  void operator()(engine::Engine& engine);
  /// Runs step() on `event` (ITERATION_STARTED unless given); the engine keeps this scheduler
  /// alive. Throws kindling::UsageError unless it is owned by a std::shared_ptr.
  engine::HandlerHandle attach(engine::Engine& engine,
                               const engine::EventsList& event = engine::Events::ITERATION_STARTED);
  /// Each scheduler's get_param() for the next event.
  std::vector<std::vector<double>> get_param();

  bool save_history() const { return schedulers_.front()->save_history(); }
  void set_save_history(bool save_history);
  const std::vector<std::shared_ptr<ParamScheduler>>& schedulers() const { return schedulers_; }
  const std::vector<std::string>& names() const { return names_; }

  /// ignite's {"schedulers": [(name, state_dict), ...]}. Local.
  StateDict state_dict() const;
  /// Restores a state_dict(): all the schedulers or, on a mismatch, none. Throws
  /// kindling::UsageError for another number of schedulers, names in another order, or a state
  /// a scheduler refuses.
  void load_state_dict(const StateDict& state_dict);

  /// (i, each scheduler's get_param()) before each of `num_events` steps of `schedulers`
  /// grouped (ignite's simulate_values); the schedulers and their optimizers' values are
  /// restored afterwards. Throws kindling::UsageError for num_events < 0 or bad schedulers.
  static std::vector<std::pair<int64_t, std::vector<std::vector<double>>>> simulate_values(
      int64_t num_events, const std::vector<std::shared_ptr<ParamScheduler>>& schedulers);

 private:
  std::vector<std::shared_ptr<ParamScheduler>> schedulers_;
  std::vector<std::string> names_;
};

}  // namespace handlers
}  // namespace kindling
