// Restarts and root-cause reporting around supervise() (see elastic.h).
#include "supervisor/process/elastic.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <stdexcept>
#include <string>

#include "common/host.h"
#include "common/error_file.h"
#include "common/files.h"
#include "supervisor/process/flight_verdict.h"

namespace kindling {
namespace supervisor {
namespace {

std::string utc_time(long long seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return text;
}

}  // namespace

ErrorFolder::ErrorFolder() {
  path_ = ::kindling::detail::make_temporary_directory("kindling-errors", "kindling-run (the workers' error files)");
}

ErrorFolder::~ErrorFolder() {
  for (const auto& f : files_) std::remove(f.c_str());
  ::rmdir(path_.c_str());
}

std::string ErrorFolder::file(int attempt, int rank) {
  files_.push_back(path_ + "/attempt" + std::to_string(attempt) + "_rank" + std::to_string(rank) + ".json");
  return files_.back();
}

AttemptFiles prepare_attempt(std::vector<WorkerSpec>& workers, int attempt, int restart_count, int max_restarts,
                             const JobIdentity& job, ErrorFolder& folder) {
  AttemptFiles files;
  files.flight_folder = flight_attempt_folder(job.run_id, attempt);
  for (auto& spec : workers) {
    files.error_files.push_back(folder.file(attempt, spec.rank));
    spec.env.emplace_back("TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count));
    spec.env.emplace_back("TORCHELASTIC_MAX_RESTARTS", std::to_string(max_restarts));
    spec.env.emplace_back("TORCHELASTIC_ERROR_FILE", files.error_files.back());
    spec.env.emplace_back("KINDLING_RUN_ID", job.run_id);
    spec.env.emplace_back("KINDLING_RUN_INSTANCE", job.instance);
    spec.env.emplace_back("KINDLING_FLIGHT_RECORD_DIR", files.flight_folder);
  }
  return files;
}

std::string flight_line(const AttemptFiles& files) {
  const std::string verdict = flight_verdict(files.flight_folder);
  return verdict.empty() ? verdict : "  flight records: " + verdict + "\n";
}

std::string new_run_id() {
  const std::string host = ::kindling::detail::host_name("host");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%Y%m%dT%H%M%S", &tm);
  std::random_device random;
  char id[160];
  std::snprintf(id, sizeof(id), "%s-%d-%s-%08x", host.c_str(), static_cast<int>(::getpid()), when,
                static_cast<unsigned>(random()));
  return id;
}

std::string first_failure(const SupervisorResult& result, const std::vector<std::string>& error_files) {
  const WorkerResult* first = nullptr;
  ::kindling::detail::ErrorRecord first_record;
  for (std::size_t i = 0; i < result.workers.size() && i < error_files.size(); ++i) {
    const auto& w = result.workers[i];
    if (!w.failed()) continue;
    auto record = ::kindling::detail::read_error_file(error_files[i]);
    if (!record) continue;
    if (first == nullptr || record->time_ns < first_record.time_ns) {
      first = &w;
      first_record = *record;
    }
  }
  if (first == nullptr) return {};
  return "rank " + std::to_string(first->rank) + " (local rank " + std::to_string(first->local_rank) + ") at " +
         utc_time(first_record.timestamp) + ": " + first_record.message;
}

SupervisorResult supervise_elastic(const std::vector<WorkerSpec>& workers, const SupervisorOptions& options,
                                   const ElasticOptions& elastic) {
  ErrorFolder folder;
  const std::string fresh = new_run_id();
  const JobIdentity job{elastic.run_id.empty() ? fresh : elastic.run_id, fresh};
  for (int attempt = 0;; ++attempt) {
    std::vector<WorkerSpec> specs = workers;
    const AttemptFiles files = prepare_attempt(specs, attempt, attempt, elastic.max_restarts, job, folder);
    if (attempt > 0 && elastic.fresh_port) {
      const std::string port = std::to_string(find_free_port());
      for (auto& w : specs)
        for (auto& kv : w.env)
          if (kv.first == "MASTER_PORT") kv.second = port;
    }
    SupervisorOptions attempt_options = options;
    attempt_options.flight_record_folder = files.flight_folder;
    SupervisorResult result = supervise(specs, attempt_options);
    if (result.exit_code != 0 && result.received_signal == 0) {
      const std::string root = first_failure(result, files.error_files);
      if (!root.empty()) result.summary += "  first failure (from the error files): " + root + "\n";
      result.summary += flight_line(files);
    }
    remove_empty_flight_folders(files.flight_folder);
    if (result.exit_code == 0 || result.received_signal != 0 || attempt >= elastic.max_restarts) {
      if (attempt > 0 && result.exit_code == 0) {
        result.summary = options.name + ": succeeded after " + std::to_string(attempt) + " restart" +
                         (attempt > 1 ? "s" : "") + "\n";
      }
      return result;
    }
    std::fputs(result.summary.c_str(), stderr);
    std::fprintf(stderr, "%s: restarting all %zu workers (restart %d of %d)\n", options.name.c_str(), workers.size(),
                 attempt + 1, elastic.max_restarts);
    std::fflush(stderr);
  }
}

}  // namespace supervisor
}  // namespace kindling
