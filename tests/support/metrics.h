#pragma once
// Helpers the metric tests share.
#include <kindling/kindling.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace kindling {
namespace testing {

/// An output transform that hands a metric the (prediction, target) pair stored under the
/// names `pred` and `target` of a named engine output.
inline metrics::OutputTransform pick(const std::string& pred, const std::string& target) {
  return [pred, target](const engine::Value& o) { return engine::Value{o[pred], o[target]}; };
}

/// name -> text of the lines "<tag> <name> <text>" of a worker's output (other lines skipped).
inline std::map<std::string, std::string> tagged_lines(const std::string& out, const std::string& tag) {
  std::map<std::string, std::string> got;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string first, name, text;
    if (fields >> first >> name >> text && first == tag) got[name] = text;
  }
  return got;
}

/// The single-rank states of `per_rank` joined into one state of per_rank.size() ranks, as a
/// distributed Metric::state_dict() lists them (entry r of each list is rank r's: ignite's
/// "__metric_state_per_rank", or a key of the layout kindling wrote before).
inline StateDict join_rank_states(const std::vector<std::shared_ptr<metrics::Metric>>& per_rank) {
  StateDict state = new_state_dict();
  for (const auto& m : per_rank) {
    for (const auto& entry : m->state_dict()) {
      const std::string& key = entry.key().toStringRef();
      if (!state.contains(key)) state.insert(key, c10::impl::GenericList(c10::AnyType::get()));
      state.at(key).toList().push_back(entry.value().toList().get(0));
    }
  }
  return state;
}

}  // namespace testing
}  // namespace kindling
