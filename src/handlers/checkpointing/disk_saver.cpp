// DiskSaver: durable, atomic checkpoint files (temporary file, fsync, rename, fsync of the
// folder), through the library's file helpers (src/common/files.h).
#include "kindling/handlers/checkpointing/disk_saver.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/files.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "kindling/timeline.h"

namespace kindling {
namespace handlers {
namespace {

constexpr const char* kTempPrefix = ".kindling-partial-";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

DiskSaver::DiskSaver(std::string dirname, DiskSaverOptions options) : dirname_(std::move(dirname)), options_(options) {
  KINDLING_CHECK(!dirname_.empty(), "kindling::handlers::DiskSaver: the folder name is empty");
  if (!saves_here()) return;
  if (!::kindling::detail::is_directory(dirname_)) {
    KINDLING_CHECK(options_.create_dir(), "kindling::handlers::DiskSaver: the folder '", dirname_,
                   "' does not exist (create_dir is false); create it or set create_dir(true)");
    ::kindling::detail::make_directories(dirname_, "kindling::handlers::DiskSaver");
  }
  std::vector<std::string> checkpoints;
  for (const auto& name : ::kindling::detail::list_directory(dirname_)) {
    if (name.rfind(kTempPrefix, 0) == 0) {
      ::unlink((dirname_ + "/" + name).c_str());
      log(LogLevel::kInfo, "kindling::handlers::DiskSaver: removed '" + name + "' in '" + dirname_ +
                               "', left by a save that did not finish");
    } else if (ends_with(name, ".pt")) {
      checkpoints.push_back(name);
    }
  }
  if (options_.require_empty() && !checkpoints.empty()) {
    std::string list;
    for (const auto& c : checkpoints) list += (list.empty() ? "" : ", ") + c;
    KINDLING_CHECK(false, "kindling::handlers::DiskSaver: files [", list,
                   "] with extension '.pt' are already "
                   "present in the folder '",
                   dirname_,
                   "'; they would be mixed with the new checkpoints: use "
                   "another folder, or require_empty(false) to keep them");
  }
}

bool DiskSaver::saves_here() const { return dist::get_rank() == options_.save_on_rank(); }

namespace {

// A checkpoint write on the timeline (kindling/timeline.h), when one records.
void record_write(int64_t start_ns, const std::string& path, std::size_t bytes) {
  if (start_ns < 0) return;
  timeline::TimelineEvent e;
  e.name = "checkpoint write";
  e.lane = timeline::Lane::kEngine;
  e.start_ns = start_ns;
  e.end_ns = timeline::now_ns();
  e.text_args.emplace_back("file", path);
  e.number_args.emplace_back("bytes", static_cast<double>(bytes));
  timeline::record(std::move(e));
}

}  // namespace

void DiskSaver::save(const std::vector<char>& bytes, const std::string& filename) {
  if (!saves_here()) return;
  const std::string who = "kindling::handlers::DiskSaver";
  const std::string final_path = dirname_ + "/" + filename;
  const int64_t start_ns = timeline::recording() ? timeline::now_ns() : -1;
  if (options_.atomic()) {
    const std::string temp = dirname_ + "/" + kTempPrefix + std::to_string(::getpid()) + "-" + filename;
    ::kindling::detail::replace_file(final_path, temp, bytes.data(), bytes.size(), who);
    record_write(start_ns, final_path, bytes.size());
    return;
  }
  ::kindling::detail::OutputFile file;
  const int error = file.open(final_path, O_CREAT | O_TRUNC);
  KINDLING_CHECK_T(Error, error == 0, who, ": cannot create '", final_path, "': ", std::strerror(error));
  try {
    file.write(bytes.data(), bytes.size(), who);
    file.close(who);
  } catch (...) {
    ::unlink(final_path.c_str());
    throw;
  }
  record_write(start_ns, final_path, bytes.size());
}

void DiskSaver::remove(const std::string& filename) {
  if (!saves_here()) return;
  const std::string path = dirname_ + "/" + filename;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    log(LogLevel::kWarning,
        "kindling::handlers::DiskSaver: could not remove '" + path + "': " + std::string(std::strerror(errno)));
  }
  if (options_.atomic()) ::kindling::detail::sync_directory(dirname_);
}

}  // namespace handlers
}  // namespace kindling
