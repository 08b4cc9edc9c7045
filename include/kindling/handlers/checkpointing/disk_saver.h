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
#include "kindling/options.h"

namespace kindling {
namespace handlers {

/// Options of DiskSaver (chain the setters), ignite's arguments.
struct KINDLING_API DiskSaverOptions {
  /// Temporary file + fsync + rename + fsync of the folder (default true).
  KINDLING_ARG(bool, atomic) = true;

  /// Create the folder (and its parents) when missing (default true).
  KINDLING_ARG(bool, create_dir) = true;

  /// Refuse a folder that already holds .pt files (default true, as ignite).
  KINDLING_ARG(bool, require_empty) = true;

  /// The rank that writes (default 0); the others do nothing.
  KINDLING_ARG(int, save_on_rank) = 0;
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
