#pragma once
/// \file
/// Checkpoint (ignite's): saves state dicts of several objects into one file per call,
/// keeps the n_saved best (by score) or latest, and loads them back.
///
/// \code
///   namespace kh = kindling::handlers;
///   auto saver = std::make_shared<kh::DiskSaver>(output_path, kh::DiskSaverOptions().require_empty(false));
///   auto checkpoint = std::make_shared<kh::Checkpoint>(
///       kh::Objects{{"model", kh::stateful(model)}, {"optimizer", kh::stateful(optimizer)},
///                   {"trainer", kh::stateful(trainer)}}, saver,
///                   kh::CheckpointOptions().filename_prefix("training").n_saved(2));
///   checkpoint->attach(trainer, Events::ITERATION_COMPLETED.every(1000));
///   ...
///   kh::Checkpoint::load_objects(to_load, "/out/training_checkpoint_1000.pt");
/// \endcode
///
/// Files: `{filename_prefix}_{name}_{global_step}_{score_name}={score}.pt`, each part only
/// when set (ignite's rules; scores with 4 decimals, integers as they are). `name` is the
/// single object's name when there is one (the file then holds that object's state dict
/// directly), else "checkpoint" (a dict of name -> state dict). A file is torch's pickle
/// format: Python's torch.load reads it as nested dicts of tensors and numbers.
///
/// Ranks: construct and call it on every rank (the choice of what to keep is made
/// identically everywhere, from the same metrics); only the saver's rank writes.
///
/// Across a resume (beyond ignite): when the engine it is attached to starts at an iteration
/// above 0 (its state was loaded) and this checkpoint holds no files yet (include_self did
/// not restore its list), it counts the files in the saver's folder that its own file name
/// pattern gives (same prefix, name, score name; ranked by the score or the global step in
/// the name) towards n_saved, as if the run had not stopped: a resumed run with n_saved(2)
/// ends with 2 files, not 4. A run that starts at iteration 0 never counts, nor removes,
/// files it did not write.
///
/// What loading checks (beyond ignite, whose torch.load trusts the file): a file is a zip
/// archive whose every entry carries the CRC-32 of its data, written by torch's archive
/// writer (LibTorch's and Python's torch.save alike); LibTorch's reader ignores them.
/// load_file first checks the archive itself: its end-of-archive record ends the file (a
/// truncated file has none), the central directory lies where that record says and lists
/// as many entries, each entry's local header is where the directory says and names the same
/// entry, each entry's data lies inside the file, and the CRC-32 of each entry's data is the
/// one recorded. A file that fails is refused with DamagedCheckpointError, naming it and what
/// failed; find_latest_intact skips such files when resuming. Bytes no reader uses (padding
/// inside local headers, times) are not covered, nor the data of an entry whose recorded
/// CRC-32 is 0 (Python's torch.save after torch.serialization.set_crc32_options(False)); a
/// file whose damage leaves every record and CRC consistent cannot be told from an intact one
/// (a 1 in 2^32 chance per damaged entry).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/state_dict.h"
#include "kindling/error.h"
#include "kindling/export.h"
#include "kindling/handlers/checkpointing/disk_saver.h"
#include "kindling/handlers/checkpointing/stateful.h"
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// Options of Checkpoint (chain the setters); ignite's arguments.
struct KINDLING_API CheckpointOptions {
  /// The first part of file names ("training", "best"); default: none.
  KINDLING_ARG(std::string, filename_prefix);

  /// The score of a checkpoint (higher is better); without it, the global step is the priority.
  KINDLING_ARG(std::function<double(engine::Engine&)>, score_function);

  /// Name of the score in file names; alone (no score_function) the score is the engine's
  /// metric of that name.
  KINDLING_ARG(std::optional<std::string>, score_name);

  /// Files to keep (>= 1; default 1); n_saved_all() keeps every file.
  KINDLING_ARG(std::optional<int>, n_saved) = 1;

 public:
  /// Keeps every file (n_saved unset).
  CheckpointOptions& n_saved_all() {
    n_saved_.reset();
    return *this;
  }

  /// The global step in file names, from (engine, event being fired); default: the engine's
  /// counter for that event.
  KINDLING_ARG(engine::GlobalStepTransform, global_step_transform);

  /// A pattern with {filename_prefix}, {name}, {global_step}, {score_name}, {score}, {ext}.
  KINDLING_ARG(std::optional<std::string>, filename_pattern);

  /// Replace the worst kept file also on an equal score (default: only on a better one).
  KINDLING_ARG(bool, greater_or_equal) = false;

  /// Also save this Checkpoint's own state (key "checkpointer").
  KINDLING_ARG(bool, include_self) = false;
};

/// A checkpoint file whose bytes are not those that were saved: a record of its archive is
/// missing or out of place, or an entry's CRC-32 differs from the one recorded (see "What
/// loading checks" above). The message names the file and what failed.
class KINDLING_API DamagedCheckpointError : public Error {
 public:
  using Error::Error;
};

class KINDLING_API Checkpoint : public std::enable_shared_from_this<Checkpoint> {
 public:
  /// A saved file and its priority (score or global step).
  struct Item {
    double priority;
    std::string filename;
  };

  /// Fired on the engine after each save (ignite's CheckpointEvents.SAVED_CHECKPOINT).
  static const engine::Event SAVED_CHECKPOINT;

  /// Throws kindling::UsageError for no objects, a null object or saver, duplicate names,
  /// n_saved < 1, or include_self with an object named "checkpointer". Every rank.
  Checkpoint(Objects to_save, std::shared_ptr<DiskSaver> save_handler, CheckpointOptions options = CheckpointOptions());
  /// With a folder: a DiskSaver(dirname) with require_empty(false).
  Checkpoint(Objects to_save, const std::string& dirname, CheckpointOptions options = CheckpointOptions());

  /// Saves when the new priority earns a place among the n_saved kept (evicting the lowest),
  /// then fires SAVED_CHECKPOINT. Every rank calls it at the same events: the objects'
  /// state dicts are taken on every rank (a metric's gathers every rank's accumulators), the
  /// saver's rank writes. Throws what the objects' state_dict and the saver throw.
  void operator()(engine::Engine& engine);
  /// Adds this checkpoint as a handler of `events` on `engine` (and registers
  /// SAVED_CHECKPOINT there), and a STARTED handler that counts an earlier attempt's files
  /// after a resume (see above; the saver's rank lists its folder and broadcasts the list,
  /// so every rank runs the engine). The engine keeps the checkpoint alive (keep_alive.h):
  /// it must be owned by a std::shared_ptr, else kindling::UsageError.
  engine::HandlerHandle attach(engine::Engine& engine, const engine::EventsList& events);

  /// The path of the latest file saved (unset before the first).
  std::optional<std::string> last_checkpoint() const;
  /// The files kept, lowest priority first.
  const std::vector<Item>& saved() const { return saved_; }
  /// Forgets the files kept (they stay on disk).
  void reset() { saved_.clear(); }

  /// {"saved": [[priority, filename], ...]}; load_state_dict restores it. Throws
  /// kindling::UsageError for another layout.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  /// Resuming after a restart (kindling-run / Parallel --max_restarts, torchrun): the most
  /// recently written `<filename_prefix>_*.pt` in `dirname` (any `*.pt` for an empty prefix),
  /// or unset when there is none or no such folder. The two-line pattern:
  /// \code
  ///   if (auto last = kh::Checkpoint::find_latest(folder, "training"))
  ///     kh::Checkpoint::load_objects(to_save, *last);
  /// \endcode
  /// Local (each rank looks itself: the folder must be shared by the ranks that load).
  static std::optional<std::string> find_latest(const std::string& dirname, const std::string& filename_prefix = "");
  /// As find_latest, but the newest of those files whose archive passes load_file's checks
  /// (above): newer damaged files are skipped, with a warning naming each and what failed, so
  /// that a restart resumes from the previous checkpoint instead of loading damaged weights.
  /// Reads each file it checks. Unset when there is no such file. Throws
  /// DamagedCheckpointError naming every file and what failed when all are damaged (they are
  /// left as they are). Local: call it on one rank and broadcast the path (the folder must be
  /// shared by the ranks that load).
  static std::optional<std::string> find_latest_intact(const std::string& dirname,
                                                       const std::string& filename_prefix = "");

  /// Loads `to_load` from the file at `path` (written by a Checkpoint). With one object and a
  /// file that holds that object's state directly, it is loaded from the file's top level.
  /// Throws DamagedCheckpointError naming the file for a truncated or damaged file (see
  /// "What loading checks"), kindling::Error naming the file for a missing or unreadable one, and
  /// kindling::UsageError naming the file, the object and the key for a missing object or a
  /// mismatched state; then no object has changed. Local: each rank reads the file itself.
  static void load_objects(const Objects& to_load, const std::string& path, bool strict = true);
  /// The same from a state dict already read (e.g. by load_file).
  static void load_objects(const Objects& to_load, const StateDict& checkpoint, bool strict = true,
                           const std::string& where = "the checkpoint");
  /// ignite's Checkpoint.get_default_score_fn: a score_function returning score_sign times
  /// the engine's metric `metric_name` (score_sign -1 for a metric where lower is better,
  /// such as a loss). Throws kindling::UsageError for a score_sign other than 1 or -1 (as
  /// ignite). The function throws kindling::UsageError naming the metric, the engine and the
  /// metrics it has when the metric is missing or not a number. Local.
  static std::function<double(engine::Engine&)> get_default_score_fn(const std::string& metric_name,
                                                                     double score_sign = 1.0);
  /// Reads a checkpoint file into its dict, after checking its archive (see "What loading
  /// checks"). Throws DamagedCheckpointError naming the file and what failed when it is
  /// truncated or damaged; kindling::Error naming the file when it is missing or not a
  /// checkpoint. Local.
  static StateDict load_file(const std::string& path);

 private:
  std::string file_pattern(bool with_step) const;
  std::string object_name() const;
  std::string filename_for(const std::string& name, const std::optional<int64_t>& global_step,
                           const std::string& score) const;
  // checkpoint_resume.cpp: the files of this pattern in the saver's folder (its rank only),
  // and their adoption at a resumed STARTED (every rank).
  std::vector<Item> earlier_files() const;
  void adopt_earlier_files(engine::Engine& engine);
  // checkpoint_resume.cpp: what is wrong with a file's archive ("" when nothing; unset when
  // the bytes are no zip archive at all), the error for it, and a whole file's bytes.
  static std::optional<std::string> archive_damage(const std::vector<char>& bytes);
  [[noreturn]] static void refuse_damaged(const std::string& path, std::size_t size, const std::string& what);
  static std::vector<char> read_bytes(const std::string& path);
  // The `<filename_prefix>_*.pt` files of `dirname`, the most recently written first.
  static std::vector<std::string> newest_first(const std::string& dirname, const std::string& filename_prefix);

  Objects to_save_;
  std::shared_ptr<DiskSaver> saver_;
  CheckpointOptions options_;
  std::vector<Item> saved_;
};

}  // namespace handlers
}  // namespace kindling
