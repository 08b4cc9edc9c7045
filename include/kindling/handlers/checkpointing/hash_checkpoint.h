#pragma once
/// \file
/// hash_checkpoint (ignite.utils.hash_checkpoint): a finished checkpoint file renamed for
/// publishing with torch.hub, whose load_state_dict_from_url(check_hash=True) compares the
/// hex digits after the last '-' of the file's name with the start of its SHA-256.
///
/// \code
///   auto hashed = kindling::handlers::hash_checkpoint("runs/best_model_3.pt", "release");
///   // hashed.path: "release/best_model_3-<8 hex digits>.pt"; hashed.sha256: 64 hex digits
/// \endcode

#include <string>

#include "kindling/export.h"

namespace kindling {
namespace handlers {

/// Where hash_checkpoint put the file, and its whole SHA-256.
struct HashedCheckpoint {
  /// `output_dir` + "/<stem>-<the first 8 hex digits of sha256>.pt".
  std::string path;
  /// The file's SHA-256, 64 lowercase hex digits (ignite returns the whole digest as well).
  std::string sha256;
};

/// Moves the file at `checkpoint_path` into `output_dir` (made with its parents when missing)
/// as "<stem>-<the first 8 hex digits of its SHA-256>.pt", as ignite 0.5.5 does: `<stem>` is
/// the file's name without its last extension, and the new name ends in ".pt" whatever the
/// old extension was. An existing file of that name is replaced. The move is a rename, or,
/// across file systems, the whole file written to the new place (through a temporary file and
/// a rename) before the old one is removed, so the new path never holds part of the file.
/// Local (no communication): call it on the one rank that owns the file, after the
/// checkpoint is written. Throws kindling::UsageError when `checkpoint_path` is not a regular
/// file; kindling::Error naming the file, the step and the system's reason when reading,
/// writing or moving fails (the file then stays where it was).
KINDLING_API HashedCheckpoint hash_checkpoint(const std::string& checkpoint_path, const std::string& output_dir);

}  // namespace handlers
}  // namespace kindling
