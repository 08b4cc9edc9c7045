// What a restart resumes from (resume.h): rank 0 picks the newest intact checkpoint, every
// rank learns it; and the error of a run that TerminateOnNan ended.
#include "resume.h"

#include <kindling/dist/dist.h>
#include <kindling/error.h>
#include <kindling/handlers/checkpointing/checkpoint.h>

namespace cifar10 {

std::string checkpoint_to_resume(const std::string& run_folder) {
  namespace kd = kindling::dist;
  std::string path, error;  // rank 0's finding, or why there is none to trust
  if (kd::get_rank() == 0) {
    try {
      path = kindling::handlers::Checkpoint::find_latest_intact(run_folder, "training").value_or("");
    } catch (const kindling::Error& e) {
      error = e.what();
    }
  }
  if (kd::get_world_size() > 1) {  // every rank ends alike, never waiting for rank 0
    path = kd::broadcast(path, 0);
    error = kd::broadcast(error, 0);
  }
  if (!error.empty()) throw kindling::Error("cifar10: cannot resume after the restart: " + error);
  return path;
}

std::string stopped_on_nan(int64_t iteration, const std::string& resumed_from, int64_t resumed_at) {
  std::string text = "cifar10: TerminateOnNan stopped the training at iteration " + std::to_string(iteration) +
                     ": the batch loss was NaN or infinite, so the run did not complete and has no results";
  if (!resumed_from.empty()) {
    text += "; it resumed from " + resumed_from + " at iteration " + std::to_string(resumed_at) + ", " +
            std::to_string(iteration - resumed_at) +
            " iteration(s) before: that checkpoint's weights or optimizer state may already be broken (resume from "
            "an earlier one with --resume_from)";
  }
  return text + "; if the loss diverged, lower --learning_rate";
}

}  // namespace cifar10
