#pragma once
/// \file
/// DiskSaver (ignite's): writes checkpoint files into a folder, on one rank. With atomic
/// (the default) a file appears under its final name only when it is complete and durable:
/// it is written to a temporary file in the same folder, fsync'ed, renamed, and the folder
/// is fsync'ed (ignite does no fsync). Temporary files left by a save that was killed are
/// removed when the next DiskSaver on that folder is constructed.

#include <string>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace handlers {

/// Options of DiskSaver (chain the setters), ignite's arguments.
struct KINDLING_API DiskSaverOptions {
  /// Temporary file + fsync + rename + fsync of the folder (default true).
  DiskSaverOptions& atomic(bool v) {
    atomic_ = v;
    return *this;
  }
  /// Create the folder (and its parents) when missing (default true).
  DiskSaverOptions& create_dir(bool v) {
    create_dir_ = v;
    return *this;
  }
  /// Refuse a folder that already holds .pt files (default true, as ignite).
  DiskSaverOptions& require_empty(bool v) {
    require_empty_ = v;
    return *this;
  }
  /// The rank that writes (default 0); the others do nothing.
  DiskSaverOptions& save_on_rank(int v) {
    save_on_rank_ = v;
    return *this;
  }
  bool atomic() const { return atomic_; }
  bool create_dir() const { return create_dir_; }
  bool require_empty() const { return require_empty_; }
  int save_on_rank() const { return save_on_rank_; }

 private:
  bool atomic_ = true, create_dir_ = true, require_empty_ = true;
  int save_on_rank_ = 0;
};

/// Writes and removes files in one folder. Construct it on every rank; only save_on_rank
/// touches the disk. Local: no communication.
class KINDLING_API DiskSaver {
 public:
  /// On the saving rank: creates the folder (create_dir) or throws kindling::UsageError when
  /// it is missing; throws kindling::UsageError naming the files when require_empty and the
  /// folder holds .pt files; removes stale temporary files of killed saves.
  explicit DiskSaver(std::string dirname, DiskSaverOptions options = DiskSaverOptions());
  virtual ~DiskSaver() = default;
  /// Writes `bytes` to dirname/filename (atomically when asked). Throws kindling::Error
  /// naming the file and the system error when the disk refuses; nothing is left under the
  /// final name then. A no-op on other ranks.
  virtual void save(const std::vector<char>& bytes, const std::string& filename);
  /// Removes dirname/filename (a missing file is not an error). A no-op on other ranks.
  virtual void remove(const std::string& filename);
  /// Whether this rank writes.
  bool saves_here() const;
  const std::string& dirname() const { return dirname_; }
  const DiskSaverOptions& options() const { return options_; }

 private:
  std::string dirname_;
  DiskSaverOptions options_;
};

}  // namespace handlers
}  // namespace kindling
