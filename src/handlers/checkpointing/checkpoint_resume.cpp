// Checkpoint across a resume: the files an earlier attempt of the run wrote with this
// checkpoint's file name pattern count towards n_saved (checkpoint.h).
#include <algorithm>
#include <cstdio>
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

}  // namespace handlers
}  // namespace kindling
