// Live recovery, the worker's side (see kindling/dist/live.h): the files of
// src/supervisor/agent/live_channel.h, read and written here.
#include "kindling/dist/live.h"

#include <fstream>

#include "common/env.h"
#include "common/files.h"
#include "dist/backends/registry.h"
#include "dist/live_round.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "launch/entered_round.h"
#include "supervisor/agent/live_channel.h"

namespace kindling {
namespace dist {

namespace {

constexpr char kWho[] = "kindling::dist::rejoin";

std::string live_folder() { return ::kindling::detail::get_env(supervisor::kLiveDirVariable).value_or(""); }

// Asks the agent for a new round: the request file, written whole.
void request_round(const std::string& folder, const std::string& why) {
  const std::string path = ::kindling::detail::join_path(folder, supervisor::kLiveRequestFile);
  const std::string text =
      std::to_string(detail::live_round()) + "\nrank " + std::to_string(get_rank()) + ": " + why.substr(0, 300);
  ::kindling::detail::replace_file(path, path + ".new." + std::to_string(get_rank()), text.data(), text.size(), kWho);
}

}  // namespace

bool live_recovery_enabled() {
  const std::string folder = live_folder();
  if (!folder.empty()) detail::say_taking_part(folder);
  return !folder.empty();
}

bool new_round_announced() {
  const std::string folder = live_folder();
  if (folder.empty()) return false;
  std::ifstream in(::kindling::detail::join_path(folder, supervisor::kLiveAnnounceFile));
  int announced = -1;
  return static_cast<bool>(in >> announced) && announced > detail::live_round();
}

void leave_job(const std::string& why) {
  const std::string folder = live_folder();
  KINDLING_CHECK(!folder.empty(), "kindling::dist::leave_job: this process was not started by `kindling-run "
                 "--live_recovery` (KINDLING_LIVE_DIR is not set), so no agent can take its node out of the job; "
                 "let the error end the job instead");
  const std::string path = ::kindling::detail::join_path(folder, supervisor::kLiveLeaveFile);
  const std::string text = why.empty() ? "rank " + std::to_string(get_rank()) + " asked to leave" : why.substr(0, 400);
  ::kindling::detail::replace_file(path, path + ".new." + std::to_string(get_rank()), text.data(), text.size(),
                                   "kindling::dist::leave_job");
}

LiveWorld rejoin(const std::string& backend, const InitOptions& options, const std::string& why,
                 std::chrono::milliseconds timeout) {
  const std::string folder = live_folder();
  KINDLING_CHECK(!folder.empty(), kWho,
                 ": this process was not started by `kindling-run --live_recovery` (KINDLING_LIVE_DIR is not set); "
                 "start the job with --live_recovery, or let it fail and restart");
  detail::say_taking_part(folder);
  if (!new_round_announced() && is_initialized()) request_round(folder, why.empty() ? "asked for a new round" : why);
  const ::kindling::detail::Round round = detail::wait_for_round(detail::live_round(), timeout, kWho);
  if (is_initialized()) finalize();
  // The new place goes to initialize() as a value (launch/entered_round.h), not through the
  // environment: this process's other threads may read that meanwhile.
  detail::enter_round(round);
  // initialize() takes a round announced while it waits for this one's ranks (live_round.h).
  initialize(backend, options);
  const auto entered = detail::entered_round();
  return LiveWorld{detail::live_round(), entered ? entered->restarts : 0, get_rank(), get_world_size()};
}

std::string why_no_new_world(const std::string& backend) {
  const detail::BackendTraits* traits = detail::find_backend(backend);
  return traits != nullptr ? traits->no_new_world : std::string();
}

}  // namespace dist
}  // namespace kindling
