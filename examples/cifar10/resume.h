// What a restart resumes from, and what a run that TerminateOnNan ended reports instead of
// results (docs/cifar10.md, "Resume").
#pragma once

#include <cstdint>
#include <string>

namespace cifar10 {

/// After a restart: the newest intact `training_*.pt` in `run_folder` (rank 0 looks with
/// Checkpoint::find_latest_intact, which warns of each damaged newer file it skips; every
/// rank learns the path), or "" when there is none. Throws kindling::Error on every rank,
/// naming each file and what failed, when every checkpoint there is damaged. Every rank
/// calls it.
std::string checkpoint_to_resume(const std::string& run_folder);

/// The error of a run that TerminateOnNan ended at `iteration`: what happened and what to
/// do, knowing the run resumed from `resumed_from` ("" for none) at `resumed_at`. Local.
std::string stopped_on_nan(int64_t iteration, const std::string& resumed_from, int64_t resumed_at);

}  // namespace cifar10
