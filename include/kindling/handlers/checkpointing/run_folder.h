#pragma once
/// \file
/// A job's run folder: one folder per job under an output path that many jobs share (sweeps,
/// job arrays, restarts), made exclusively under a unique name, marked with the launcher's
/// job identity (kindling::dist::run_id()) and the token of this start of the job
/// (kindling::dist::run_instance()), and found again by both, and by nothing else, when the
/// launcher restarts the job.
///
/// \code
///   namespace kh = kindling::handlers;
///   const kh::RunFolder run = kh::open_run_folder(output_path, "resnet18_backend-gloo-2");
///   if (run.continued)
///     if (auto last = kh::Checkpoint::find_latest(run.path, "training")) ...  // resume
/// \endcode
///
/// What is guaranteed when jobs share `output_path`: two jobs never get the same folder,
/// even when started in the same second on different hosts of one file system (mkdir is the
/// lock; a name taken gets a suffix -2, -3, ...); a restarted job continues only in the folder
/// its own earlier attempt made (the marker holds the job's identity and, under kindling-run
/// and Parallel, the token of this start of the job, so that another job given the same
/// --rdzv_id, finished or running, is never continued); a job started without a restarting
/// launcher always gets a new folder, whatever its shell's variables say. Under torchrun,
/// which gives no such token, two jobs with one --rdzv_id and one output path cannot be told
/// apart: give each job its own --rdzv_id there.

#include <string>

#include "kindling/export.h"

namespace kindling {
namespace handlers {

/// The folder open_run_folder chose.
struct KINDLING_API RunFolder {
  /// The folder's path (`<output_path>/<name>_<YYYYmmdd-HHMMSS>[-<n>]`).
  std::string path;
  /// True when it is the folder of an earlier attempt of this job (a restart continues in it).
  bool continued = false;

  /// On rank 0, removes the folder when this attempt made it and it still holds nothing but
  /// its marker (a run that failed before writing anything leaves no empty folder behind).
  /// Returns whether it was removed. Never throws. Local: call it on any rank (only rank 0 acts).
  bool remove_if_unused() const;
};

/// The name of the marker file in a run folder; its first line holds the job's identity (empty
/// without one), its second the token of that start of the job (absent without one).
KINDLING_API extern const char* const kRunFolderMarker;

/// Makes or finds this job's run folder under `output_path` (created with its parents when
/// missing). Rank 0 decides and every rank gets its answer: collective over the world when
/// the distributed model has several ranks, so every rank must call it. After a restart
/// (kindling::dist::restart_count() > 0 and a kindling::dist::run_id()), the folder under
/// `output_path` whose marker holds this job's identity and token and whose name starts with
/// `restart_prefix` (empty: `<name>_`, so another name is another setting), when there is
/// one; else a new folder
/// named `<name>_<local time YYYYmmdd-HHMMSS>`, with "-2", "-3", ... appended when that name
/// is taken. Logs (INFO) which folder and why; a TORCHELASTIC_RESTART_COUNT that no launcher
/// set is ignored with a warning. Throws kindling::UsageError, naming the path and the
/// system's reason, when the folder cannot be created or written (on rank 0; then the
/// others fail in the broadcast). A name that holds the world size, which an elastic restart
/// (kindling-run --nnodes MIN:MAX) may change, continues in the job's folder when
/// `restart_prefix` is the part of the name before it.
KINDLING_API RunFolder open_run_folder(const std::string& output_path, const std::string& name,
                                       const std::string& restart_prefix = "");

}  // namespace handlers
}  // namespace kindling
