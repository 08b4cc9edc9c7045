// Timer: wall time between events.
#include "kindling/handlers/profilers/timer.h"

#include <algorithm>

#include "kindling/engine/keep_alive.h"

namespace kindling {
namespace handlers {

Timer::Timer(bool average) : average_(average), since_(std::chrono::steady_clock::now()) {}

Timer& Timer::attach(engine::Engine& engine, const engine::Event& start, std::optional<engine::Event> pause,
                     std::optional<engine::Event> resume, std::optional<engine::Event> step) {
  auto self = engine::keep_alive(*this, "kindling::handlers::Timer");
  engine.add_event_handler(start, [self] { self->reset(); });
  if (pause) engine.add_event_handler(*pause, [self] { self->pause(); });
  if (resume) engine.add_event_handler(*resume, [self] { self->resume(); });
  if (step) engine.add_event_handler(*step, [self] { self->step(); });
  return *this;
}

void Timer::reset() {
  running_ = true;
  total_ = 0.0;
  steps_ = 0;
  since_ = std::chrono::steady_clock::now();
}

void Timer::pause() {
  if (!running_) return;
  total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
  running_ = false;
}

void Timer::resume() {
  if (running_) return;
  since_ = std::chrono::steady_clock::now();
  running_ = true;
}

double Timer::value() const {
  double t = total_;
  if (running_) t += std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
  return average_ ? t / static_cast<double>(std::max<int64_t>(1, steps_)) : t;
}

}  // namespace handlers
}  // namespace kindling
