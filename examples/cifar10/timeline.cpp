// The cifar10 example's --timeline (timeline.h).
#include "timeline.h"

#include <kindling/error.h>

#include <cctype>

namespace cifar10 {
namespace {

// A whole positive number written in `text`, or -1.
int64_t whole(const std::string& text) {
  if (text.empty() || text.size() > 15) return -1;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  return std::stoll(text);
}

}  // namespace

std::pair<int64_t, int64_t> timeline_range(const std::string& text) {
  const auto colon = text.find(':');
  const int64_t first = colon == std::string::npos ? -1 : whole(text.substr(0, colon));
  const int64_t last = colon == std::string::npos ? -1 : whole(text.substr(colon + 1));
  KINDLING_CHECK(first >= 1 && last >= first, "--timeline '", text,
                 "': give the first and last training iteration to record as N:M with 1 <= N <= M, e.g. 20:22");
  return {first, last};
}

std::shared_ptr<kindling::handlers::Timeline> attach_timeline(
    const std::string& range, const std::string& folder, kindling::engine::Engine& trainer,
    const std::vector<std::pair<kindling::engine::Engine*, std::string>>& watched) {
  const auto iterations = timeline_range(range);
  auto timeline = std::make_shared<kindling::handlers::Timeline>(kindling::handlers::TimelineOptions()
                                                                     .folder(folder)
                                                                     .first_iteration(iterations.first)
                                                                     .last_iteration(iterations.second));
  timeline->attach(trainer);
  for (const auto& w : watched) timeline->watch(*w.first, w.second);
  return timeline;
}

}  // namespace cifar10
