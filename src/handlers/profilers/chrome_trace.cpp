// Ranks' events as a Chrome trace (chrome_trace.h). Written by hand with json_text.h's
// quoting and numbers: the format is a flat list of small objects, and a document library
// would hold the whole trace twice in memory.
#include "handlers/profilers/chrome_trace.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "handlers/loggers/json_text.h"

namespace kindling {
namespace handlers {
namespace detail {
namespace {

constexpr int kEngineRow = 1, kStepRow = 2, kFirstCommunicationRow = 3;

std::string microseconds(int64_t ns) { return shortest_number(static_cast<double>(ns) / 1000.0); }

// The trace's events, comma-separated.
struct Events {
  std::ostringstream text;
  bool first = true;
  std::ostringstream& next() {
    text << (first ? "\n" : ",\n");
    first = false;
    return text;
  }
};

void metadata(Events& events, const char* what, int pid, int tid, const std::string& key, const std::string& value) {
  std::ostringstream& out = events.next();
  out << "{\"name\":\"" << what << "\",\"ph\":\"M\",\"pid\":" << pid;
  if (tid > 0) out << ",\"tid\":" << tid;
  out << ",\"args\":{\"" << key << "\":" << value << "}}";
}

void span(Events& events, const timeline::TimelineEvent& e, int pid, int tid, const char* category) {
  std::ostringstream& out = events.next();
  out << "{\"name\":" << json_quote(e.name) << ",\"cat\":\"" << category << "\",\"ph\":\"X\",\"pid\":" << pid
      << ",\"tid\":" << tid << ",\"ts\":" << microseconds(e.start_ns)
      << ",\"dur\":" << microseconds(std::max<int64_t>(0, e.end_ns - e.start_ns)) << ",\"args\":{";
  bool first = true;
  for (const auto& kv : e.text_args) {
    out << (first ? "" : ",") << json_quote(kv.first) << ":" << json_quote(kv.second);
    first = false;
  }
  for (const auto& kv : e.number_args) {
    out << (first ? "" : ",") << json_quote(kv.first) << ":" << shortest_number(kv.second);
    first = false;
  }
  out << "}}";
}

// One rank's events; operations that overlap go to rows of their own (the first row free
// at their start), since spans of one row must nest.
void rank_events(Events& out, const RankTimeline& rank) {
  std::vector<const timeline::TimelineEvent*> order;
  order.reserve(rank.events.size());
  for (const auto& e : rank.events) order.push_back(&e);
  // A parent before its children: by start, then the longer first.
  std::stable_sort(order.begin(), order.end(), [](const timeline::TimelineEvent* a, const timeline::TimelineEvent* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
  });
  std::vector<int64_t> row_end;  // per communication row: where its last operation ended
  for (const timeline::TimelineEvent* e : order) {
    if (e->lane == timeline::Lane::kEngine) {
      span(out, *e, rank.rank, kEngineRow, "engine");
    } else if (e->lane == timeline::Lane::kStep) {
      span(out, *e, rank.rank, kStepRow, "step");
    } else {
      const std::size_t row = take_row(row_end, e->start_ns, e->end_ns);
      span(out, *e, rank.rank, kFirstCommunicationRow + static_cast<int>(row), "communication");
    }
  }
  const std::string pid_name = json_quote("rank " + std::to_string(rank.rank));
  metadata(out, "process_name", rank.rank, 0, "name", pid_name);
  metadata(out, "process_sort_index", rank.rank, 0, "sort_index", std::to_string(rank.rank));
  metadata(out, "thread_name", rank.rank, kEngineRow, "name", "\"engine\"");
  metadata(out, "thread_name", rank.rank, kStepRow, "name", "\"step\"");
  for (std::size_t row = 0; row < std::max<std::size_t>(row_end.size(), 1); ++row) {
    const std::string name = row == 0 ? "communication" : "communication " + std::to_string(row + 1);
    metadata(out, "thread_name", rank.rank, kFirstCommunicationRow + static_cast<int>(row), "name", json_quote(name));
  }
  for (int tid = kEngineRow; tid < kFirstCommunicationRow + static_cast<int>(row_end.size()); ++tid)
    metadata(out, "thread_sort_index", rank.rank, tid, "sort_index", std::to_string(tid));
}

}  // namespace

std::size_t take_row(std::vector<int64_t>& row_end, int64_t start_ns, int64_t end_ns) {
  std::size_t row = 0;
  while (row < row_end.size() && row_end[row] > start_ns) ++row;
  if (row == row_end.size()) row_end.push_back(0);
  row_end[row] = end_ns;
  return row;
}

std::string chrome_trace(const std::vector<RankTimeline>& ranks, const std::string& other_data) {
  Events events;
  for (const RankTimeline& rank : ranks) rank_events(events, rank);
  return "{\"displayTimeUnit\":\"ms\",\"otherData\":{" + other_data + "},\n\"traceEvents\":[" + events.text.str() +
         "\n]}\n";
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
