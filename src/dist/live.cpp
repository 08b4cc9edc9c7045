// Live recovery, the worker's side (see kindling/dist/live.h): the files of
// src/supervisor/live_channel.h, read and written here.
#include "kindling/dist/live.h"

#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/env.h"
#include "common/files.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "supervisor/live_channel.h"

namespace kindling {
namespace dist {

namespace {

constexpr char kWho[] = "kindling::dist::rejoin";
using Clock = std::chrono::steady_clock;

std::string live_folder() { return ::kindling::detail::get_env(launch::kLiveDirVariable).value_or(""); }

int current_round() { return ::kindling::detail::get_env_int(launch::kLiveRoundVariable).value_or(-1); }

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The "round" file's key=value lines; empty when it is not there.
std::map<std::string, std::string> read_round(const std::string& folder) {
  std::map<std::string, std::string> fields;
  std::istringstream lines(read_text(::kindling::detail::join_path(folder, launch::kLiveRoundFile)));
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) fields[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return fields;
}

int field(const std::map<std::string, std::string>& fields, const std::string& name) {
  return ::kindling::detail::parse_int(fields.at(name), std::string(kWho) + ": the launcher's round field " + name);
}

// Asks the agent for a new round: the request file, written whole.
void request_round(const std::string& folder, const std::string& why) {
  const std::string path = ::kindling::detail::join_path(folder, launch::kLiveRequestFile);
  const std::string text =
      std::to_string(current_round()) + "\nrank " + std::to_string(get_rank()) + ": " + why.substr(0, 300);
  ::kindling::detail::replace_file(path, path + ".new." + std::to_string(get_rank()), text.data(), text.size(), kWho);
}

}  // namespace

bool live_recovery_enabled() { return !live_folder().empty(); }

bool new_round_announced() {
  const std::string folder = live_folder();
  if (folder.empty()) return false;
  const std::string text = read_text(::kindling::detail::join_path(folder, launch::kLiveAnnounceFile));
  return !text.empty() && std::atoi(text.c_str()) > current_round();
}

LiveWorld rejoin(const std::string& backend, const InitOptions& options, const std::string& why,
                 std::chrono::milliseconds timeout) {
  const std::string folder = live_folder();
  KINDLING_CHECK(!folder.empty(), kWho,
                 ": this process was not started by `kindling-run --live_recovery` (KINDLING_LIVE_DIR is not set); "
                 "start the job with --live_recovery, or let it fail and restart");
  const int before = current_round();
  if (!new_round_announced() && is_initialized()) request_round(folder, why.empty() ? "asked for a new round" : why);
  const auto deadline = Clock::now() + timeout;
  std::map<std::string, std::string> round = read_round(folder);
  while (round.empty() || field(round, "round") <= before) {
    KINDLING_CHECK_T(TimeoutError, Clock::now() < deadline, kWho, ": no new rendezvous round within ",
                     timeout.count() / 1000.0, " s after round ", before,
                     "; the launcher ends the job when its rendezvous fails (see its output)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    round = read_round(folder);
  }
  if (is_initialized()) finalize();
  const int local_rank = ::kindling::detail::get_env_int("LOCAL_RANK").value_or(0);
  LiveWorld world{field(round, "round"), field(round, "restarts"), field(round, "rank_offset") + local_rank,
                  field(round, "world_size")};
  using ::kindling::detail::set_env;
  set_env("RANK", std::to_string(world.rank));
  set_env("ROLE_RANK", std::to_string(world.rank));
  set_env("WORLD_SIZE", std::to_string(world.world_size));
  set_env("ROLE_WORLD_SIZE", std::to_string(world.world_size));
  set_env("GROUP_RANK", round.at("node_rank"));
  set_env("GROUP_WORLD_SIZE", round.at("nnodes"));
  set_env("MASTER_ADDR", round.at("master_addr"));
  set_env("MASTER_PORT", round.at("master_port"));
  set_env("TORCHELASTIC_RESTART_COUNT", std::to_string(world.restarts));
  set_env(launch::kLiveRoundVariable, std::to_string(world.round));
  log(LogLevel::kInfo, "live recovery: round " + std::to_string(world.round) + " (" + round.at("hosts") + "): rank " +
                           std::to_string(world.rank) + " of " + std::to_string(world.world_size) +
                           " in the same process");
  initialize(backend, options);
  return world;
}

}  // namespace dist
}  // namespace kindling
