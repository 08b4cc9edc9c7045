// Checkpoint: what to keep (ignite's priority rules and file names), writing through the
// saver on its rank, and loading that changes nothing when it fails.
#include "kindling/handlers/checkpointing/checkpoint.h"

#include <torch/serialize.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <utility>

#include "common/files.h"
#include "handlers/checkpointing/deep_copy.h"
#include "kindling/engine/keep_alive.h"
#include "kindling/error.h"

namespace kindling {
namespace handlers {

using engine::Engine;

const engine::Event Checkpoint::SAVED_CHECKPOINT = engine::Event::custom("SAVED_CHECKPOINT");

Checkpoint::Checkpoint(Objects to_save, std::shared_ptr<DiskSaver> save_handler, CheckpointOptions options)
    : to_save_(std::move(to_save)), saver_(std::move(save_handler)), options_(std::move(options)) {
  KINDLING_CHECK(!to_save_.empty(), "kindling::handlers::Checkpoint: nothing to save (to_save is empty)");
  KINDLING_CHECK(saver_ != nullptr, "kindling::handlers::Checkpoint: the save handler is null");
  std::set<std::string> names;
  for (const auto& [name, object] : to_save_) {
    KINDLING_CHECK(object != nullptr, "kindling::handlers::Checkpoint: object '", name, "' is null");
    KINDLING_CHECK(names.insert(name).second, "kindling::handlers::Checkpoint: two objects are named '", name, "'");
    KINDLING_CHECK(!options_.include_self() || name != "checkpointer",
                   "kindling::handlers::Checkpoint: cannot "
                   "have an object named 'checkpointer' with include_self, which saves the checkpoint's own state "
                   "under that name");
  }
  KINDLING_CHECK(!options_.n_saved() || *options_.n_saved() >= 1,
                 "kindling::handlers::Checkpoint: n_saved should "
                 "be at least 1, got ",
                 options_.n_saved().value_or(0), "; use n_saved_all() to keep every file");
}

Checkpoint::Checkpoint(Objects to_save, const std::string& dirname, CheckpointOptions options)
    : Checkpoint(std::move(to_save), std::make_shared<DiskSaver>(dirname, DiskSaverOptions().require_empty(false)),
                 std::move(options)) {}

std::string Checkpoint::file_pattern(bool with_step) const {
  if (options_.filename_pattern()) return *options_.filename_pattern();
  const bool with_score = static_cast<bool>(options_.score_function()) || options_.score_name().has_value();
  std::string pattern = "{name}";
  if (!options_.filename_prefix().empty()) pattern = "{filename_prefix}_" + pattern;
  if (with_step) pattern += "_{global_step}";
  if (options_.score_name() && with_score) {
    pattern += "_{score_name}={score}";
  } else if (with_score) {
    pattern += "_{score}";
  }
  return pattern + ".{ext}";
}

std::string Checkpoint::object_name() const {
  return to_save_.size() == 1 && !options_.include_self() ? to_save_.front().first : "checkpoint";
}

std::string Checkpoint::filename_for(const std::string& name, const std::optional<int64_t>& global_step,
                                     const std::string& score) const {
  const std::string pattern = file_pattern(global_step.has_value());
  const std::vector<std::pair<std::string, std::string>> fields{
      {"{filename_prefix}", options_.filename_prefix()},
      {"{name}", name},
      {"{global_step}", global_step ? std::to_string(*global_step) : std::string()},
      {"{score_name}", options_.score_name().value_or("")},
      {"{score}", score},
      {"{ext}", "pt"}};
  std::string out;
  for (std::size_t i = 0; i < pattern.size();) {
    bool replaced = false;
    for (const auto& [key, value] : fields) {
      if (pattern.compare(i, key.size(), key) == 0) {
        out += value;
        i += key.size();
        replaced = true;
        break;
      }
    }
    if (!replaced) out += pattern[i++];
  }
  KINDLING_CHECK(out.find('/') == std::string::npos, "kindling::handlers::Checkpoint: the file name '", out,
                 "' contains '/'; the prefix and names must not name folders (set the saver's folder instead)");
  return out;
}

void Checkpoint::operator()(Engine& engine) {
  const engine::Event event = engine.last_event().value_or(engine::Events::COMPLETED);
  std::optional<int64_t> global_step;
  if (options_.global_step_transform()) global_step = options_.global_step_transform()(engine, event);
  double priority;
  std::string score;
  if (options_.score_function() || options_.score_name()) {
    priority = options_.score_function() ? options_.score_function()(engine)
                                         : get_default_score_fn(*options_.score_name())(engine);
    KINDLING_CHECK(std::isfinite(priority), "kindling::handlers::Checkpoint: the score is ", priority,
                   "; a checkpoint needs a finite number to rank files");
    char text[64];
    std::snprintf(text, sizeof(text), "%.4f", priority);
    score = text;
  } else {
    // ignite: the engine's iteration, whatever event (or earlier handler) fired last.
    if (!global_step) global_step = engine.state().iteration;
    priority = static_cast<double>(*global_step);
  }
  const auto n_saved = options_.n_saved();
  const std::size_t keep = n_saved ? static_cast<std::size_t>(*n_saved) : 0;
  const bool room = !n_saved || saved_.size() < keep;
  // Measured against the lowest of the n_saved best (more are kept only after a resume
  // adopted an earlier attempt's files: checkpoint_resume.cpp).
  const double bar = room ? 0.0 : saved_[saved_.size() - keep].priority;
  const bool better = !room && (options_.greater_or_equal() ? priority >= bar : priority > bar);
  if (!room && !better) return;

  const std::string name = object_name();
  const std::string filename = filename_for(name, global_step, score);
  auto same = std::find_if(saved_.begin(), saved_.end(), [&](const Item& i) { return i.filename == filename; });
  if (same != saved_.end()) saved_.erase(same);  // the file is overwritten
  saved_.push_back({priority, filename});
  std::stable_sort(saved_.begin(), saved_.end(), [](const Item& a, const Item& b) { return a.priority < b.priority; });
  std::vector<std::string> to_remove;
  while (n_saved && saved_.size() > keep) {
    to_remove.push_back(saved_.front().filename);
    saved_.erase(saved_.begin());
  }

  // Built on every rank: a metric's state_dict gathers every rank's accumulators.
  c10::IValue content;
  if (name != "checkpoint") {
    content = to_save_.front().second->state_dict();
  } else {
    StateDict all = new_state_dict();
    for (const auto& [key, object] : to_save_) all.insert(key, object->state_dict());
    if (options_.include_self()) all.insert("checkpointer", state_dict());
    content = all;
  }
  if (saver_->saves_here()) {
    const std::vector<char> bytes = torch::pickle_save(content);
    saver_->save(bytes, filename);  // the new file is complete before the old one goes
  }
  for (const auto& old : to_remove)
    if (old != filename) saver_->remove(old);
  engine.register_events({SAVED_CHECKPOINT});
  engine.fire_event(SAVED_CHECKPOINT);
}

engine::HandlerHandle Checkpoint::attach(Engine& engine, const engine::EventsList& events) {
  engine.register_events({SAVED_CHECKPOINT});
  auto self = engine::keep_alive(*this, "kindling::handlers::Checkpoint");
  engine.add_event_handler(engine::Events::STARTED, [self](Engine& e) { self->adopt_earlier_files(e); });
  return engine.add_event_handler(events, [self](Engine& e) { (*self)(e); });
}

std::optional<std::string> Checkpoint::last_checkpoint() const {
  if (saved_.empty()) return std::nullopt;
  return saver_->dirname() + "/" + saved_.back().filename;
}

StateDict Checkpoint::state_dict() const {
  StateDict sd = new_state_dict();
  c10::impl::GenericList items(c10::AnyType::get());
  for (const auto& item : saved_) items.push_back(c10::ivalue::Tuple::create(item.priority, item.filename));
  sd.insert("saved", items);
  return sd;
}

void Checkpoint::load_state_dict(const StateDict& state) {
  KINDLING_CHECK(state.contains("saved") && state.at("saved").isList(),
                 "kindling::handlers::Checkpoint::"
                 "load_state_dict: expected the key 'saved' with a list of (priority, filename)");
  std::vector<Item> items;
  for (const auto& v : state.at("saved").toList()) {
    const c10::IValue item = v;
    KINDLING_CHECK(item.isTuple() && item.toTuple()->elements().size() == 2,
                   "kindling::handlers::Checkpoint::load_state_dict: an entry of 'saved' is not (priority, filename)");
    const auto& e = item.toTuple()->elements();
    items.push_back({e[0].isDouble() ? e[0].toDouble() : static_cast<double>(e[0].toInt()), e[1].toStringRef()});
  }
  saved_ = std::move(items);
}

namespace {

// Why LibTorch's reader refused `bytes`, in the user's terms: torch.save's legacy format, a
// zip archive cut short, a pickle with Python objects LibTorch cannot rebuild, or no checkpoint.
std::string unreadable_because(const std::vector<char>& bytes, const std::string& reason) {
  const bool zip = bytes.size() >= 4 && std::equal(bytes.begin(), bytes.begin() + 4, "PK\x03\x04");
  const bool legacy_pickle = bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80;
  if (legacy_pickle)
    return "is in torch.save's legacy format (before torch 1.6, or _use_new_zipfile_serialization=False), which "
           "LibTorch cannot read; in Python, load it and torch.save it again with the default format";
  if (zip && reason.find("zip archive") != std::string::npos)
    return "is an incomplete torch.save archive (truncated or corrupt: the copy or the save was cut short)";
  if (zip)
    return "is a torch.save archive whose pickle LibTorch's reader cannot rebuild, as when Python's torch.save "
           "wrote objects other than plain dicts, lists, tuples, tensors, numbers and strings (an OrderedDict such "
           "as module.state_dict() is one: save dict(state_dict)); LibTorch 1.13's reader also lacks the opcode "
           "Python writes for a dict of exactly one entry";
  return "is not a checkpoint (not torch.save's format; truncated or corrupt?)";
}

}  // namespace

std::function<double(engine::Engine&)> Checkpoint::get_default_score_fn(const std::string& metric_name,
                                                                        double score_sign) {
  KINDLING_CHECK(score_sign == 1.0 || score_sign == -1.0,
                 "kindling::handlers::Checkpoint::get_default_score_fn: score_sign should be 1 or -1 (ignite's rule), "
                 "got ",
                 score_sign, "; pass 1 for a metric where higher is better (an accuracy), -1 where lower is (a loss)");
  return [metric_name, score_sign](engine::Engine& engine) {
    const auto& metrics = engine.state().metrics;
    auto it = metrics.find(metric_name);
    const bool numeric =
        it != metrics.end() && (it->second.is_number() || (it->second.is_tensor() && it->second.tensor().defined() &&
                                                           it->second.tensor().numel() == 1));
    if (!numeric) {
      std::string present;
      for (const auto& kv : metrics) present += (present.empty() ? "" : ", ") + kv.first;
      KINDLING_CHECK(false, "kindling::handlers::Checkpoint: the score's metric '", metric_name, "' ",
                     it == metrics.end() ? "is not among the metrics of engine "
                                         : "is not a number (nor a one-element tensor) in engine ",
                     engine.name, " (it has: ", present.empty() ? "none" : present,
                     "); attach that metric to the engine whose event saves the checkpoint, or give a score_function");
    }
    return score_sign * it->second.number();
  };
}

StateDict Checkpoint::load_file(const std::string& path) {
  const std::vector<char> bytes = read_bytes(path);
  // Before LibTorch's reader, which checks no CRC (checkpoint_resume.cpp).
  if (const auto wrong = archive_damage(bytes); wrong && !wrong->empty()) refuse_damaged(path, bytes.size(), *wrong);
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    KINDLING_CHECK_T(Error, false, "kindling::handlers::Checkpoint: '", path, "' (", bytes.size(), " bytes) ",
                     unreadable_because(bytes, what), ": ", what);
  }
  KINDLING_CHECK_T(Error, value.isGenericDict(), "kindling::handlers::Checkpoint: '", path, "' holds a ",
                   value.tagKind(), ", not a dict of state dicts");
  return value.toGenericDict();
}

std::vector<std::string> Checkpoint::newest_first(const std::string& dirname, const std::string& filename_prefix) {
  std::vector<std::pair<std::int64_t, std::string>> found;  // (time, name)
  if (!::kindling::detail::is_directory(dirname)) return {};
  for (const auto& name : ::kindling::detail::list_directory(dirname)) {
    const bool prefixed = filename_prefix.empty() || name.rfind(filename_prefix + "_", 0) == 0;
    const bool checkpoint = name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0;
    const std::string path = ::kindling::detail::join_path(dirname, name);
    if (!prefixed || !checkpoint || !::kindling::detail::is_regular_file(path)) continue;
    if (const auto when = ::kindling::detail::modified_ns(path)) found.emplace_back(*when, name);
  }
  // Newest first; equal times (coarse clocks) go to the larger name, so step 1000 beats 999
  // only by time, never by name alone.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> paths;
  for (const auto& entry : found) paths.push_back(::kindling::detail::join_path(dirname, entry.second));
  return paths;
}

std::optional<std::string> Checkpoint::find_latest(const std::string& dirname, const std::string& filename_prefix) {
  const auto paths = newest_first(dirname, filename_prefix);
  return paths.empty() ? std::nullopt : std::optional<std::string>(paths.front());
}

void Checkpoint::load_objects(const Objects& to_load, const std::string& path, bool strict) {
  load_objects(to_load, load_file(path), strict, "'" + path + "'");
}

void Checkpoint::load_objects(const Objects& to_load, const StateDict& checkpoint, bool strict,
                              const std::string& where) {
  KINDLING_CHECK(!to_load.empty(), "kindling::handlers::Checkpoint::load_objects: nothing to load");
  // One object and a file that is that object's own state (no key of its name).
  const bool direct = to_load.size() == 1 && !checkpoint.contains(to_load.front().first);
  std::vector<std::pair<const std::pair<std::string, std::shared_ptr<Stateful>>*, StateDict>> plan;
  for (const auto& entry : to_load) {
    StateDict state = checkpoint;
    if (!direct) {
      KINDLING_CHECK(
          checkpoint.contains(entry.first), "kindling::handlers::Checkpoint::load_objects: object '", entry.first,
          "' is not found in ", where, " (it holds: ",
          [&] {
            std::string keys;
            for (const auto& kv : checkpoint) keys += (keys.empty() ? "" : ", ") + kv.key().toStringRef();
            return keys;
          }(),
          ")");
      const c10::IValue v = checkpoint.at(entry.first);
      KINDLING_CHECK(v.isGenericDict(), "kindling::handlers::Checkpoint::load_objects: object '", entry.first, "' in ",
                     where, " is a ", v.tagKind(), ", not a state dict");
      state = v.toGenericDict();
    }
    plan.emplace_back(&entry, state);
  }
  // Keep every object's current state (down to the tensors of a group's members) so that a
  // failure part-way leaves all as they were.
  std::vector<StateDict> backups;
  for (const auto& step : plan)
    backups.push_back(::kindling::detail::deep_copy(step.first->second->state_dict()).toGenericDict());
  std::size_t done = 0;
  try {
    for (; done < plan.size(); ++done) plan[done].first->second->load_state_dict(plan[done].second, strict);
  } catch (const std::exception& e) {
    for (std::size_t i = 0; i <= done && i < plan.size(); ++i) {
      try {
        plan[i].first->second->load_state_dict(backups[i], false);
      } catch (...) {
      }
    }
    KINDLING_CHECK(false, "kindling::handlers::Checkpoint::load_objects: object '", plan[done].first->first, "' from ",
                   where, ": ", e.what(), "; nothing was changed");
  }
}

}  // namespace handlers
}  // namespace kindling
