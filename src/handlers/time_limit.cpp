// TimeLimit: terminates the engine past a wall-time budget, the ranks agreeing through an
// all_reduce(MAX) of their elapsed times.
#include "kindling/handlers/time_limit.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "kindling/dist/dist.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

namespace {
constexpr const char* kTimeLimitWho = "kindling::handlers::TimeLimit";
}  // namespace

TimeLimit::TimeLimit(double limit_sec, const TimeLimitOptions& options)
    : limit_sec_(limit_sec), check_every_(options.check_every()), start_(std::chrono::steady_clock::now()) {
  KINDLING_CHECK(std::isfinite(limit_sec_) && limit_sec_ > 0, kTimeLimitWho, ": limit_sec should be a positive ",
                 "number of seconds, got ", limit_sec_, " (the default is 28800, 8 hours)");
  KINDLING_CHECK(check_every_ >= 1, kTimeLimitWho, ": check_every should be >= 1, got ", check_every_,
                 "; pass 1 to check at every call (the default), or k to check (and all-reduce) at every k-th call");
}

double TimeLimit::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void TimeLimit::operator()(engine::Engine& engine) {
  if (++calls_ % check_every_ != 0) return;
  // Every rank makes this call at the same event: the slowest clock decides for all.
  const double slowest = dist::all_reduce(elapsed(), dist::ReduceOp::kMax);
  if (slowest <= limit_sec_) return;
  if (dist::get_rank() == 0) {
    std::ostringstream line;
    line << kTimeLimitWho << ": the time limit of " << limit_sec_ << " s is reached (" << std::fixed
         << std::setprecision(2) << slowest << " s spent); stopping " << engine.name << " at iteration "
         << engine.state().iteration;
    log(LogLevel::kWarning, line.str());
  }
  engine.terminate();
}

engine::HandlerHandle TimeLimit::attach(engine::Engine& engine, const engine::EventsList& event) {
  std::shared_ptr<TimeLimit> self = engine::keep_alive(*this, kTimeLimitWho);
  return engine.add_event_handler(event, [self](engine::Engine& e) { (*self)(e); });
}

}  // namespace handlers
}  // namespace kindling
