#pragma once
// Who this process is in the distributed model, for messages: the one place that the lowest
// floor (errors, the log) reads it from, so that common/ never includes the runtime. The
// runtime sets it when a distributed model is installed and clears it at finalize().
//
// Before initialize (or without it), "which rank am I" has one answer too, process_identity():
// the launcher's variables, read by kindling::dist::detect_launch_environment's precedence
// (src/launch/launch_env.cpp, a floor above; it installs its reader here when the library
// loads). The log's rank tag, the engine logger and the handlers' loggers all ask it.
#include <optional>
#include <utility>

namespace kindling {
namespace detail {

/// Records rank and world size of the model just installed. Any thread; never throws.
void set_identity(int rank, int world_size);
/// Back to the serial model. Any thread; never throws.
void clear_identity();
/// (rank, world size) of the active distributed model, or nullopt in the serial model.
std::optional<std::pair<int, int>> identity();

/// Reads the launcher's (rank, world size) from this process's environment; nullopt when no
/// launcher started it; throws kindling::UsageError for inconsistent variables.
using LauncherIdentity = std::optional<std::pair<int, int>> (*)();
/// Installs the launcher's reader: called once, by src/launch/launch_env.cpp while the library
/// loads (common/ may not include src/launch). Any thread; never throws.
void set_launcher_identity(LauncherIdentity reader);

/// This process's (rank, world size), the one rule for "which rank am I": the distributed
/// model's once one is installed (identity()), else the launcher's variables by
/// detect_launch_environment's precedence (a Slurm task, RANK / WORLD_SIZE, horovodrun's
/// HOROVOD_*, mpirun's OMPI_COMM_WORLD_*, PMIX_RANK), else nullopt (a plain single process).
/// Before initialize it reads the environment at each call, so that it follows it. Throws
/// kindling::UsageError, naming the variables, when they are inconsistent (as initialize()
/// would); callers that must not throw (the log) catch it. Any thread of any rank.
std::optional<std::pair<int, int>> process_identity();
/// process_identity()'s rank, 0 when it has none. Throws as process_identity(). Any rank.
int process_rank();

}  // namespace detail
}  // namespace kindling
