#pragma once
/// \file
/// How kindling recognises the launcher that started a process, as a pure function of an
/// environment map (so every rule is testable without the launcher).
///
/// Precedence, first match wins (the innermost launcher is the one that started us):
///  1. Slurm task (SLURM_JOB_ID set) with no mpirun / horovodrun variables: ranks from
///     SLURM_PROCID / SLURM_LOCALID / SLURM_NTASKS; a torchrun started inside an srun task
///     (all of RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set) is accepted under
///     idist's consistency rules; MASTER_ADDR is the first host of SLURM_JOB_NODELIST and
///     MASTER_PORT 15000 + the last four digits of the job id.
///  2. RANK and WORLD_SIZE (torchrun, kindling-run, a Parallel parent, or set by hand);
///     LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK when present.
///  3. horovodrun: HOROVOD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE / _CROSS_RANK /
///     _CROSS_SIZE; rendezvous on MASTER_ADDR / MASTER_PORT when set, else 127.0.0.1 on one
///     node, else HOROVOD_GLOO_RENDEZVOUS_ADDR (horovodrun's host, assumed to run rank 0)
///     and HOROVOD_GLOO_RENDEZVOUS_PORT + 1.
///  4. Open MPI's mpirun: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE;
///     rendezvous on MASTER_ADDR / MASTER_PORT when set, else 127.0.0.1 on one node and a
///     port derived from the job id (20000 + job family % 30000).
///  5. PMIx without Open MPI's variables: PMIX_RANK, size from OMPI_APP_CTX_NUM_PROCS.
///  6. Nothing: a single process (rank 0 of 1).

#include <map>
#include <optional>
#include <exception>
#include <string>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace dist {

using EnvMap = std::map<std::string, std::string>;

/// What a launcher says about this process. Unknown values stay empty; initialize()
/// fills them (MASTER_ADDR 127.0.0.1, MASTER_PORT 15000, local rank from the node layout).
struct KINDLING_API LaunchEnvironment {
  /// "none", "slurm", "torchrun", "kindling-run", "parallel" (a Parallel parent), "env"
  /// (RANK / WORLD_SIZE set by hand), "horovod", "mpirun" or "pmix".
  std::string launcher = "none";
  int rank = 0;
  int world_size = 1;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::optional<int> node_rank;
  std::optional<int> nnodes;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  /// Non-fatal findings (ignored partial variables, assumptions made).
  std::vector<std::string> warnings;
  /// Set when the launcher (mpirun, horovodrun) started ranks on several nodes and neither
  /// it nor MASTER_ADDR says where rank 0 runs: what to export. The mpi backend needs no
  /// rendezvous address (Open MPI connects the ranks); initialize() refuses the other
  /// backends with this message.
  std::string master_addr_missing;

  bool detected() const { return launcher != "none"; }
};

/// Applies the rules above to `env`. Throws kindling::UsageError, naming the variables,
/// for an incomplete or inconsistent environment.
KINDLING_API LaunchEnvironment detect_launch_environment(const EnvMap& env);
/// The same on this process's environment.
KINDLING_API LaunchEnvironment detect_launch_environment();
/// This process's environment as a map, read in one piece. After a live-recovery rejoin
/// (kindling/dist/live.h) the round it entered replaces the launcher's variables of the place
/// it was started in (RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR, TORCHELASTIC_RESTART_COUNT...),
/// as a process the launcher started in that round would have them. Any thread.
KINDLING_API EnvMap current_environment();

/// Expands a Slurm host list ("node[1-3,7],gpu-[01-02]x") into host names, following
/// idist's expander (ranges sorted and de-duplicated within one bracket group, zero
/// padding kept, no de-duplication across items). Throws kindling::UsageError for an
/// empty bracket group or a malformed range.
KINDLING_API std::vector<std::string> expand_hostlist(const std::string& nodelist);

/// Expands Slurm's tasks-per-node form ("2(x3),1" -> {2, 2, 2, 1}).
KINDLING_API std::vector<int> expand_tasks_per_node(const std::string& text);

/// How many times the launcher restarted this job so far (TORCHELASTIC_RESTART_COUNT, set by
/// kindling-run / Parallel and by torchrun); 0 on the first attempt, and 0 when no launcher
/// that restarts started this process (a value left in a shell is not a restart). Throws
/// kindling::UsageError for a malformed value. Any rank.
KINDLING_API int restart_count();

/// The launcher's identity of this job, the same in each of its attempts and new for every
/// job: KINDLING_RUN_ID from kindling-run and Parallel (made unique per launch, or
/// kindling-run's --rdzv_id), TORCHELASTIC_RUN_ID from torchrun (its --rdzv_id; torchrun's
/// default "none" is no identity). Unset without such a launcher: variables left in a shell
/// are not an identity. What a restarted job uses to find its own earlier attempt (see
/// kindling/handlers/checkpointing/run_folder.h). Any rank; on several nodes each node's launcher sets its
/// own unless they are given the same --rdzv_id, so decide on one rank.
KINDLING_API std::optional<std::string> run_id();

/// What only this start of the job has: a token kindling-run and Parallel make when the job
/// starts (on several nodes, the rendezvous host's agent) and keep in each of its restarts
/// (KINDLING_RUN_INSTANCE), so that two jobs given one --rdzv_id, one after the other or at
/// once, are still told apart. Unset under torchrun and without a launcher (torchrun has no
/// such token: give each torchrun job its own --rdzv_id). Never throws. Any rank.
KINDLING_API std::optional<std::string> run_instance();

/// Records `e` as this worker's failure in the torchelastic error file named by
/// TORCHELASTIC_ERROR_FILE (kindling-run, Parallel and torchrun set it), so that the
/// launcher reports the job's first failure with its message and time. The first error a
/// process records stays (its root cause): a later call writes nothing and returns true.
/// Returns whether the file holds an error (false without the variable). Never throws. Parallel::run and an
/// exception that escapes the program after initialize() record it already; call it
/// where a program catches an error and exits non-zero itself.
KINDLING_API bool record_error(const std::exception& e);

}  // namespace dist
}  // namespace kindling
