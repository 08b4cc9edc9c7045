// Checkpoint across a resume: the files an earlier attempt of the run wrote with this
// checkpoint's file name pattern count towards n_saved (checkpoint.h); and what a resume
// must be able to trust, a file that is the one that was saved (its archive checked in
// zip_check.cpp), and the newest intact file found (find_latest_intact).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "common/files.h"
#include "kindling/dist/dist.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

namespace {

std::string regex_escape(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

}  // namespace

std::vector<Checkpoint::Item> Checkpoint::earlier_files() const {
  const bool with_score = static_cast<bool>(options_.score_function()) || options_.score_name().has_value();
  const bool with_step = static_cast<bool>(options_.global_step_transform()) || !with_score;
  const std::string pattern = file_pattern(with_step);
  // The pattern as a regular expression: fixed fields literally, the step and score captured.
  const std::vector<std::pair<std::string, std::string>> fixed{{"{filename_prefix}", options_.filename_prefix()},
                                                               {"{name}", object_name()},
                                                               {"{score_name}", options_.score_name().value_or("")},
                                                               {"{ext}", "pt"}};
  std::string expression;
  int groups = 0, step_group = 0, score_group = 0;
  for (std::size_t i = 0; i < pattern.size();) {
    bool field = false;
    for (const auto& [key, value] : fixed) {
      if (pattern.compare(i, key.size(), key) != 0) continue;
      expression += regex_escape(value);
      i += key.size();
      field = true;
    }
    if (field) continue;
    if (pattern.compare(i, 13, "{global_step}") == 0) {
      expression += "([0-9]+)";
      step_group = ++groups;
      i += 13;
    } else if (pattern.compare(i, 7, "{score}") == 0) {
      expression += "(-?[0-9]+(?:\\.[0-9]+)?)";
      score_group = ++groups;
      i += 7;
    } else {
      expression += regex_escape(pattern.substr(i++, 1));
    }
  }
  const int rank_by = with_score ? score_group : step_group;
  std::vector<Item> found;
  if (rank_by == 0 || !::kindling::detail::is_directory(saver_->dirname())) return found;  // nothing to rank by
  const std::regex names(expression);
  for (const auto& name : ::kindling::detail::list_directory(saver_->dirname())) {
    std::smatch m;
    if (!std::regex_match(name, m, names)) continue;
    if (!::kindling::detail::is_regular_file(::kindling::detail::join_path(saver_->dirname(), name))) continue;
    found.push_back({std::stod(m[rank_by].str()), name});
  }
  std::stable_sort(found.begin(), found.end(), [](const Item& a, const Item& b) { return a.priority < b.priority; });
  return found;
}

void Checkpoint::adopt_earlier_files(engine::Engine& engine) {
  if (!saved_.empty() || engine.state().iteration == 0) return;
  const int src = saver_->options().save_on_rank();
  std::string listed;  // "<priority>\t<file>\n" per file, made on the saver's rank
  if (saver_->saves_here()) {
    for (const auto& item : earlier_files()) {
      char priority[40];
      std::snprintf(priority, sizeof(priority), "%.17g", item.priority);
      listed += std::string(priority) + "\t" + item.filename + "\n";
    }
  }
  // Every rank must decide alike what to keep (a metric's state_dict is collective).
  if (dist::get_world_size() > 1) listed = dist::broadcast(listed, src);
  std::istringstream in(listed);
  std::string line, names;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    saved_.push_back({std::stod(line.substr(0, tab)), line.substr(tab + 1)});
    names += (names.empty() ? "" : ", ") + line.substr(tab + 1);
  }
  if (!saved_.empty() && saver_->saves_here())
    log(LogLevel::kInfo,
        "kindling::handlers::Checkpoint: resumed at iteration " + std::to_string(engine.state().iteration) + "; the " +
            std::to_string(saved_.size()) + " earlier file(s) of this checkpoint in " + saver_->dirname() +
            " count towards n_saved (" +
            (options_.n_saved() ? std::to_string(*options_.n_saved()) : std::string("all")) + "): " + names);
}

void Checkpoint::refuse_damaged(const std::string& path, std::size_t size, const std::string& what) {
  KINDLING_CHECK_T(DamagedCheckpointError, false, "kindling::handlers::Checkpoint: '", path, "' (", size,
                   " bytes) is damaged: ", what,
                   ". Its bytes are not those that were saved (a disk, copy or transfer error, or something wrote into "
                   "it); resume from an earlier checkpoint (Checkpoint::find_latest_intact skips damaged files), or "
                   "copy this one again from an intact source");
}

std::vector<char> Checkpoint::read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KINDLING_CHECK_T(Error, in.good(), "kindling::handlers::Checkpoint: cannot open '", path,
                   "': no such file or it is not readable");
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::optional<std::string> Checkpoint::find_latest_intact(const std::string& dirname,
                                                          const std::string& filename_prefix) {
  std::string damaged;
  for (const auto& path : newest_first(dirname, filename_prefix)) {
    std::string wrong;
    try {
      const std::vector<char> bytes = read_bytes(path);
      wrong = archive_damage(bytes).value_or(
          "not a torch.save archive (no zip header at its start, no end-of-archive record at its end)");
    } catch (const Error& e) {
      wrong = e.what();
    }
    if (wrong.empty()) {
      if (!damaged.empty())
        log(LogLevel::kWarning, "kindling::handlers::Checkpoint: resuming from '" + path +
                                    "', the newest intact checkpoint; skipped as damaged: " + damaged);
      return path;
    }
    damaged += (damaged.empty() ? "" : "; ") + ("'" + path + "' (" + wrong + ")");
  }
  KINDLING_CHECK_T(DamagedCheckpointError, damaged.empty(),
                   "kindling::handlers::Checkpoint::find_latest_intact: "
                   "every checkpoint in '",
                   dirname, "' is damaged: ", damaged,
                   ". Nothing to resume from; they are left as they are: copy intact ones there, or move them away "
                   "to start afresh");
  return std::nullopt;
}

}  // namespace handlers
}  // namespace kindling
