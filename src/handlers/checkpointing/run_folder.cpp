// A job's run folder (kindling/handlers/checkpointing/run_folder.h): exclusive creation with a unique name,
// the job's identity in a marker, and the search for it after a restart. Files through the
// library's helpers (src/common/files.h); mkdir(2) itself where its atomicity is the point.
#include "kindling/handlers/checkpointing/run_folder.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <optional>

#include "common/files.h"
#include "kindling/dist/dist.h"
#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

const char* const kRunFolderMarker = ".kindling-run";

namespace {

using ::kindling::detail::join_path;
using ::kindling::detail::make_directories;

constexpr const char* kWho = "kindling::handlers::open_run_folder";

// Who made a run folder: the launcher's job identity (first line of the marker) and the token
// of that start of the job (second line; absent under torchrun and in folders of older
// versions, which no job with a token continues).
struct Owner {
  std::string identity;
  std::string instance;
  bool operator==(const Owner& other) const { return identity == other.identity && instance == other.instance; }
};

std::optional<Owner> read_marker(const std::string& folder) {
  std::ifstream in(join_path(folder, kRunFolderMarker));
  if (!in) return std::nullopt;
  Owner owner;
  std::getline(in, owner.identity);
  std::getline(in, owner.instance);
  return owner;
}

// The marker, written whole under a temporary name then renamed: a reader sees all or none.
void write_marker(const std::string& folder, const Owner& owner) {
  const std::string final_name = join_path(folder, kRunFolderMarker);
  const std::string text = owner.identity + "\n" + (owner.instance.empty() ? "" : owner.instance + "\n");
  ::kindling::detail::replace_file(final_name, final_name + ".partial", text.data(), text.size(), kWho);
}

std::string find_own_folder(const std::string& output_path, const std::string& prefix, const Owner& owner) {
  std::string found;
  std::int64_t newest = -1;
  for (const auto& entry : ::kindling::detail::list_directory(output_path)) {
    if (entry.rfind(prefix, 0) != 0) continue;
    const std::string folder = join_path(output_path, entry);
    if (!::kindling::detail::is_directory(folder)) continue;
    const auto marker = read_marker(folder);
    if (!marker || !(*marker == owner)) continue;
    const auto when = ::kindling::detail::modified_ns(folder);
    if (when && *when > newest) {
      newest = *when;
      found = folder;
    }
  }
  return found;
}

// mkdir is atomic: of two jobs asking for one name, exactly one gets it; the other tries
// the next suffix.
std::string make_unique_folder(const std::string& output_path, const std::string& name) {
  char now[32];
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&t, &local);
  std::strftime(now, sizeof(now), "%Y%m%d-%H%M%S", &local);
  const std::string stem = join_path(output_path, name + "_" + now);
  for (int n = 1; n <= 10000; ++n) {
    const std::string folder = n == 1 ? stem : stem + "-" + std::to_string(n);
    if (::mkdir(folder.c_str(), 0777) == 0) return folder;
    KINDLING_CHECK(errno == EEXIST, kWho, ": cannot create the run folder ", folder, " (", std::strerror(errno),
                   "); check the output path and its permissions");
  }
  KINDLING_CHECK(false, kWho, ": 10000 run folders named ", stem, "-* exist; clean up the output path");
  return {};
}

// Rank 0's decision: (folder, continued).
RunFolder decide(const std::string& output_path, const std::string& name, const std::string& restart_prefix) {
  make_directories(output_path, kWho);
  const int restarts = dist::restart_count();
  const auto identity = dist::run_id();
  const Owner owner{identity.value_or(""), dist::run_instance().value_or("")};
  const char* stale = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (restarts == 0 && stale != nullptr && std::atoi(stale) > 0) {
    log(LogLevel::kWarning, std::string(kWho) + ": TORCHELASTIC_RESTART_COUNT=" + stale +
                                " is set but no restarting launcher (kindling-run, Parallel, torchrun) started this "
                                "process: it is ignored and a new run folder is made (unset it in your shell)");
  }
  RunFolder run;
  if (restarts > 0 && identity) {
    run.path = find_own_folder(output_path, restart_prefix.empty() ? name + "_" : restart_prefix, owner);
    run.continued = !run.path.empty();
    log(LogLevel::kInfo,
        std::string(kWho) + ": restart " + std::to_string(restarts) + " of job " + *identity +
            (run.continued ? ": continuing in " + run.path
                           : ": its earlier attempt made no run folder under " + output_path + "; starting a new one"));
  } else if (restarts > 0) {
    log(LogLevel::kWarning, std::string(kWho) + ": restart " + std::to_string(restarts) +
                                " but the launcher gives no job identity (torchrun's --rdzv_id is 'none'?): a new "
                                "run folder is made; give the launcher --rdzv_id to continue in the earlier one");
  }
  if (!run.continued) {
    run.path = make_unique_folder(output_path, name);
    write_marker(run.path, owner);
  }
  return run;
}

}  // namespace

RunFolder open_run_folder(const std::string& output_path, const std::string& name, const std::string& restart_prefix) {
  KINDLING_CHECK(!name.empty() && name.find('/') == std::string::npos, kWho, ": the name must be a non-empty ",
                 "folder name without '/', got '", name, "'");
  // Rank 0 decides; its answer (or its error) reaches every rank, so that no rank waits
  // for a broadcast that never comes.
  std::string answer;
  if (dist::get_rank() == 0) {
    try {
      const RunFolder run = decide(output_path, name, restart_prefix);
      answer = std::string(run.continued ? "c" : "n") + run.path;
    } catch (const std::exception& e) {
      answer = std::string("e") + e.what();
    }
  }
  if (dist::get_world_size() > 1) answer = dist::broadcast(answer, 0);
  KINDLING_CHECK(!answer.empty() && answer[0] != 'e',
                 answer.empty() ? std::string(kWho) + ": no answer" : answer.substr(1));
  RunFolder run;
  run.continued = answer[0] == 'c';
  run.path = answer.substr(1);
  return run;
}

bool RunFolder::remove_if_unused() const {
  if (continued || path.empty() || dist::get_rank() != 0) return false;
  if (!::kindling::detail::is_directory(path)) return false;
  for (const auto& entry : ::kindling::detail::list_directory(path)) {
    if (entry != kRunFolderMarker) return false;
  }
  ::unlink(join_path(path, kRunFolderMarker).c_str());
  return ::rmdir(path.c_str()) == 0;
}

}  // namespace handlers
}  // namespace kindling
