// Timeline (kindling/handlers/profilers/timeline.h): the range control and the engine's spans
// (an observer per engine), the clocks aligned as the range starts, the ranks' events gathered
// to rank 0 and written as Chrome traces as it ends.
#include "kindling/handlers/profilers/timeline.h"

#include <utility>

#include "handlers/profilers/chrome_trace.h"
#include "handlers/profilers/time_profiler_detail.h"
#include "kindling/dist/clock.h"
#include "kindling/dist/dist.h"
#include "kindling/engine/observer.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {

// The ranks' events travel to rank 0 with all_gather_object.
template <>
struct Codec<timeline::TimelineEvent> {
  static std::string name() { return "kindling.TimelineEvent"; }
  static void encode(ByteWriter& out, const timeline::TimelineEvent& e) {
    Codec<std::string>::encode(out, e.name);
    out.pod(static_cast<int32_t>(e.lane));
    out.pod(e.start_ns);
    out.pod(e.end_ns);
    Codec<std::vector<std::pair<std::string, std::string>>>::encode(out, e.text_args);
    Codec<std::vector<std::pair<std::string, double>>>::encode(out, e.number_args);
  }
  static timeline::TimelineEvent decode(ByteReader& in) {
    timeline::TimelineEvent e;
    e.name = Codec<std::string>::decode(in);
    e.lane = static_cast<timeline::Lane>(in.pod<int32_t>());
    e.start_ns = in.pod<int64_t>();
    e.end_ns = in.pod<int64_t>();
    e.text_args = Codec<std::vector<std::pair<std::string, std::string>>>::decode(in);
    e.number_args = Codec<std::vector<std::pair<std::string, double>>>::decode(in);
    return e;
  }
};

template <>
struct Codec<handlers::RankTimeline> {
  static std::string name() { return "kindling.RankTimeline"; }
  static void encode(ByteWriter& out, const handlers::RankTimeline& r) {
    out.pod(static_cast<int32_t>(r.rank));
    out.pod(r.clock_offset_ns);
    out.pod(r.clock_uncertainty_ns);
    out.pod(r.dropped_events);
    Codec<std::vector<timeline::TimelineEvent>>::encode(out, r.events);
  }
  static handlers::RankTimeline decode(ByteReader& in) {
    handlers::RankTimeline r;
    r.rank = in.pod<int32_t>();
    r.clock_offset_ns = in.pod<int64_t>();
    r.clock_uncertainty_ns = in.pod<int64_t>();
    r.dropped_events = in.pod<int64_t>();
    r.events = Codec<std::vector<timeline::TimelineEvent>>::decode(in);
    return r;
  }
};

}  // namespace dist

namespace handlers {
namespace {

constexpr const char* kWho = "kindling::handlers::Timeline";

}  // namespace

struct Timeline::State {
  TimelineOptions options;
  bool attached = false;
  bool active = false;
  bool done = false;
  int64_t last_recorded = 0;  // the trainer's iteration when the range ended
  dist::ClockOffset offset;
  int64_t origin_local_ns = 0;  // rank 0's start of the range, on this rank's clock
  std::vector<std::string> files;
  std::vector<RankTimeline> ranks;

  // Collective: aligns the clocks and starts recording.
  void begin() {
    KINDLING_CHECK(!timeline::recording(), kWho,
                   ": another timeline records now; record one range at a time (one Timeline per run)");
    const int64_t origin = timeline::now_ns();  // rank 0's is the one kept
    offset = dist::measure_clock_offset(options.clock_rounds());
    origin_local_ns = dist::broadcast_object<int64_t>(origin, 0) - offset.offset_ns;
    timeline::start_recording(options.max_events());
    active = true;
  }

  // Ends the range: this rank's events on rank 0's clock; with `gather` (a collective) every
  // rank's to rank 0. Then the files.
  void finish(bool gather, int64_t iteration) {
    RankTimeline mine;
    mine.events = timeline::stop_recording();
    mine.dropped_events = static_cast<int64_t>(timeline::dropped_events());
    active = false;
    done = true;
    last_recorded = iteration;
    mine.rank = dist::get_rank();
    mine.clock_offset_ns = offset.offset_ns;
    mine.clock_uncertainty_ns = offset.uncertainty_ns;
    for (auto& e : mine.events) {
      e.start_ns -= origin_local_ns;
      e.end_ns -= origin_local_ns;
    }
    ranks.clear();
    if (gather && dist::get_world_size() > 1) {
      ranks = dist::all_gather_object(mine);
      if (mine.rank != 0) ranks = {ranks[static_cast<std::size_t>(mine.rank)]};
    } else {
      ranks.push_back(std::move(mine));
    }
    write_files(gather);
  }

  std::string other_data(const std::vector<RankTimeline>& which) const {
    std::string text =
        "\"producer\":\"kindling timeline\",\"first_iteration\":" + std::to_string(options.first_iteration()) +
        ",\"last_iteration\":" + std::to_string(last_recorded) +
        ",\"time_unit\":\"microseconds from rank 0's start of the range\"," + "\"ranks\":[";
    for (std::size_t i = 0; i < which.size(); ++i) {
      text += (i ? "," : "");
      text += "{\"rank\":" + std::to_string(which[i].rank) +
              ",\"clock_offset_ns\":" + std::to_string(which[i].clock_offset_ns) +
              ",\"clock_uncertainty_ns\":" + std::to_string(which[i].clock_uncertainty_ns) +
              ",\"dropped_events\":" + std::to_string(which[i].dropped_events) + "}";
    }
    return text + "]";
  }

  void write(const std::string& name, const std::vector<RankTimeline>& which) {
    const std::string path = options.folder() + "/" + name;
    profiler_detail::write_file_at_once(path, detail::chrome_trace(which, other_data(which)), kWho);
    files.push_back(path);
  }

  void write_files(bool merged) {
    const int rank = dist::get_rank();
    for (const auto& r : ranks)
      if (r.rank == rank) write("timeline_rank_" + std::to_string(rank) + ".json", {r});
    if (!merged || rank != 0) return;
    write("timeline.json", ranks);
    log(LogLevel::kInfo, std::string(kWho) + ": iterations " + std::to_string(options.first_iteration()) + " to " +
                             std::to_string(last_recorded) + " of " + std::to_string(ranks.size()) +
                             " rank(s) written to " + files.back() +
                             " (open it in https://ui.perfetto.dev or chrome://tracing)");
  }
};

namespace {

// One engine's spans on the engine row; the trainer's also starts and ends the range.
class EngineWatch : public engine::EventObserver {
 public:
  EngineWatch(std::shared_ptr<Timeline::State> state, std::string prefix, bool controls)
      : state_(std::move(state)), prefix_(std::move(prefix)), controls_(controls) {}

  void before_event(engine::Engine& engine, const engine::Event& event) override {
    using engine::Events;
    if (controls_ && event.same_event(Events::GET_BATCH_STARTED) && starts_range(engine)) state_->begin();
    if (controls_ && state_->active && event.same_event(Events::EXCEPTION_RAISED))
      state_->finish(false, engine.state().iteration);  // the others may be gone: no gather
    const int64_t now = timeline::now_ns();
    firings_.push_back(Firing{now, false});
    if (event.same_event(Events::GET_BATCH_STARTED)) iteration_start_ = now;
    if (event.same_event(Events::GET_BATCH_COMPLETED)) span(prefix_ + "data", data_start_, now);
    if (event.same_event(Events::ITERATION_COMPLETED)) span(prefix_ + "process", process_start_, now);
  }

  void after_event(engine::Engine& engine, const engine::Event& event) override {
    using engine::Events;
    const int64_t now = timeline::now_ns();
    if (!firings_.empty()) {
      const Firing firing = firings_.back();
      firings_.pop_back();
      if (firing.handlers_ran) span(prefix_ + event.name(), firing.start, now);
    }
    if (event.same_event(Events::GET_BATCH_STARTED) || event.same_event(Events::DATALOADER_STOP_ITERATION))
      data_start_ = now;
    if (event.same_event(Events::ITERATION_STARTED)) process_start_ = now;
    if (event.same_event(Events::ITERATION_COMPLETED)) {
      span(prefix_ + "iteration " + std::to_string(engine.state().iteration), iteration_start_, now);
      if (controls_ && state_->active && engine.state().iteration >= state_->options.last_iteration())
        state_->finish(true, engine.state().iteration);
    }
    if (controls_ && state_->active && event.same_event(Events::COMPLETED))
      state_->finish(true, engine.state().iteration);
  }

  void handler_called(engine::Engine&, const engine::Event& event, const engine::HandlerInfo& handler,
                      double seconds) override {
    if (!firings_.empty()) firings_.back().handlers_ran = true;
    if (!timeline::recording()) return;
    // The engine's own readings (the same steady clock as timeline::now_ns): a span ending
    // now would come later by the time since the handler returned, and under load it crossed
    // the spans the handler holds (an evaluator run inside it: TimelineRanksTest, 2026-11-29).
    const int64_t end = handler.ended_ns >= 0 ? handler.ended_ns : timeline::now_ns();
    timeline::TimelineEvent e;
    e.name = engine::handler_name(handler);
    e.lane = timeline::Lane::kEngine;
    e.start_ns = handler.started_ns >= 0 ? handler.started_ns : end - static_cast<int64_t>(seconds * 1e9);
    e.end_ns = end;
    e.text_args.emplace_back("event", prefix_ + event.name());
    timeline::record(std::move(e));
  }

 private:
  struct Firing {
    int64_t start;
    bool handlers_ran;
  };

  bool starts_range(engine::Engine& engine) const {
    const int64_t next = engine.state().iteration + 1;
    return !state_->active && !state_->done && next >= state_->options.first_iteration() &&
           next <= state_->options.last_iteration();
  }

  static void span(std::string name, int64_t start, int64_t end) {
    if (start < 0 || !timeline::recording()) return;
    timeline::TimelineEvent e;
    e.name = std::move(name);
    e.lane = timeline::Lane::kEngine;
    e.start_ns = start;
    e.end_ns = end;
    timeline::record(std::move(e));
  }

  std::shared_ptr<Timeline::State> state_;
  std::string prefix_;
  bool controls_;
  std::vector<Firing> firings_;
  int64_t iteration_start_ = -1, data_start_ = -1, process_start_ = -1;
};

}  // namespace

Timeline::Timeline(TimelineOptions options) : state_(std::make_shared<State>()) {
  KINDLING_CHECK(options.first_iteration() >= 1 && options.last_iteration() >= options.first_iteration(), kWho,
                 ": the range is iterations ", options.first_iteration(), " to ", options.last_iteration(),
                 "; give 1 <= first_iteration <= last_iteration (ignite's iteration numbers start at 1)");
  KINDLING_CHECK(options.max_events() > 0, kWho, ": max_events=0 keeps nothing; give a bound (1000000 by default)");
  KINDLING_CHECK(options.clock_rounds() >= 1, kWho, ": clock_rounds=", options.clock_rounds(),
                 "; give at least 1 round trip per rank (8 by default)");
  state_->options = std::move(options);
}

Timeline::~Timeline() {
  if (!state_->active) return;
  try {
    state_->finish(false, -1);
  } catch (const std::exception& e) {
    log(LogLevel::kError, std::string(kWho) + ": this rank's timeline could not be written: " + e.what());
  }
}

void Timeline::attach(engine::Engine& trainer) {
  KINDLING_CHECK(!state_->attached, kWho,
                 ".attach: already attached to a trainer; the range counts one engine's iterations (watch() shows "
                 "others)");
  trainer.add_observer(std::make_shared<EngineWatch>(state_, "", true));
  state_->attached = true;
}

void Timeline::watch(engine::Engine& engine, const std::string& name) {
  engine.add_observer(std::make_shared<EngineWatch>(state_, name.empty() ? name : name + " ", false));
}

bool Timeline::recording() const { return state_->active; }

std::vector<std::string> Timeline::files() const { return state_->files; }

const std::vector<RankTimeline>& Timeline::ranks() const { return state_->ranks; }

}  // namespace handlers
}  // namespace kindling
