// Run folders (kindling/handlers/checkpointing/run_folder.h) and the launcher's job identity they rest on
// (kindling::dist::run_id / restart_count): unique names, the marker, a restart that finds
// its own folder and no other, variables left in a shell that are no identity.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/run_folder.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/files.h"

namespace {

namespace kd = kindling::dist;
namespace kh = kindling::handlers;
using kindling::testing::error_of;
using kindling::testing::files_in;
using kindling::testing::ScopedEnv;

// The marker's line `n` (0: the job's identity, 1: the token of that start of the job).
std::string marker_of(const std::string& folder, int n = 0) {
  std::ifstream in(folder + "/" + kh::kRunFolderMarker);
  std::string line;
  for (int i = 0; i <= n; ++i) {
    line.clear();
    std::getline(in, line);
  }
  return line;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// As kindling-run starts a worker of job `id` in attempt `attempt` of the job's start
// `instance` (none: unset).
void as_kindling_run_worker(ScopedEnv& env, const std::string& id, int attempt, const std::string& instance = "") {
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  env.set("KINDLING_RUN", "1");
  env.set("KINDLING_RUN_ID", id);
  env.set("KINDLING_RUN_INSTANCE", instance.empty() ? std::nullopt : std::optional<std::string>(instance));
  env.set("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt));
}

}  // namespace

TEST(RunFolderTest, EveryCallGetsItsOwnMarkedFolder) {
  ScopedEnv env;
  for (const char* name : {"RANK", "WORLD_SIZE", "KINDLING_RUN", "KINDLING_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                           "TORCHELASTIC_RUN_ID", "KINDLING_PARALLEL_CHILD"})
    env.set(name, std::nullopt);
  const kindling::testing::TempDir folder("run-folder");
  const std::string out = folder.path() + "/nested/out";
  std::set<std::string> paths;
  for (int i = 0; i < 5; ++i) {  // within one or two seconds: names are taken, suffixes follow
    const kh::RunFolder run = kh::open_run_folder(out, "resnet18_backend-none-1");
    EXPECT_FALSE(run.continued);
    EXPECT_TRUE(is_dir(run.path)) << run.path;
    EXPECT_EQ(run.path.rfind(out + "/resnet18_backend-none-1_", 0), 0u) << run.path;
    EXPECT_EQ(files_in(run.path), std::vector<std::string>{kh::kRunFolderMarker});
    EXPECT_EQ(marker_of(run.path), "") << "no launcher: no identity";
    paths.insert(run.path);
  }
  EXPECT_EQ(paths.size(), 5u);
  EXPECT_EQ(files_in(out).size(), 5u);

  // A folder this attempt made and left empty is removed; one with content is kept.
  const kh::RunFolder unused = kh::open_run_folder(out, "x");
  EXPECT_TRUE(unused.remove_if_unused());
  EXPECT_FALSE(is_dir(unused.path));
  const kh::RunFolder used = kh::open_run_folder(out, "x");
  std::ofstream(used.path + "/events") << "x";
  EXPECT_FALSE(used.remove_if_unused());
  EXPECT_TRUE(is_dir(used.path));

  const std::string blocked = out + "/" + files_in(out).front() + "/" + kh::kRunFolderMarker + "/below";
  const std::string error = error_of([&] { kh::open_run_folder(blocked, "x"); });
  EXPECT_NE(error.find("cannot create the directory"), std::string::npos) << error;
  EXPECT_NE(error.find(kh::kRunFolderMarker), std::string::npos) << error;
  EXPECT_NE(error_of([&] { kh::open_run_folder(out, "a/b"); }).find("without '/'"), std::string::npos);
  std::system(("rm -rf " + out.substr(0, out.size() - std::string("/nested/out").size())).c_str());
}

TEST(RunFolderTest, ARestartContinuesInItsOwnJobsFolderOnly) {
  ScopedEnv env;
  env.set("TORCHELASTIC_RUN_ID", std::nullopt);
  env.set("KINDLING_PARALLEL_CHILD", std::nullopt);
  const kindling::testing::TempDir out_folder("run-folder");
  const std::string out = out_folder.path();
  as_kindling_run_worker(env, "job-a", 0);
  EXPECT_EQ(kd::run_id(), std::optional<std::string>("job-a"));
  EXPECT_EQ(kd::restart_count(), 0);
  const kh::RunFolder a = kh::open_run_folder(out, "m");
  EXPECT_EQ(marker_of(a.path), "job-a");
  as_kindling_run_worker(env, "job-b", 0);  // another job, same settings, a newer folder
  const kh::RunFolder b = kh::open_run_folder(out, "m");
  EXPECT_EQ(marker_of(b.path), "job-b");

  as_kindling_run_worker(env, "job-a", 1);
  EXPECT_EQ(kd::restart_count(), 1);
  const kh::RunFolder again = kh::open_run_folder(out, "m");
  EXPECT_TRUE(again.continued);
  EXPECT_EQ(again.path, a.path) << "job-a's restart must continue in job-a's folder, not the newest";
  EXPECT_FALSE(again.remove_if_unused()) << "a continued folder is never removed";
  EXPECT_EQ(kh::open_run_folder(out, "other").continued, false) << "another name is another setting";

  as_kindling_run_worker(env, "job-c", 2);  // its first attempt made no folder
  const kh::RunFolder fresh = kh::open_run_folder(out, "m");
  EXPECT_FALSE(fresh.continued);
  EXPECT_EQ(marker_of(fresh.path), "job-c");

  // Left in a shell, without the launcher's other variables: no restart, no identity.
  env.set("KINDLING_RUN", std::nullopt);
  env.set("RANK", std::nullopt);
  env.set("WORLD_SIZE", std::nullopt);
  env.set("KINDLING_RUN_ID", "job-a");
  env.set("TORCHELASTIC_RESTART_COUNT", "1");
  EXPECT_EQ(kd::restart_count(), 0);
  EXPECT_EQ(kd::run_id(), std::nullopt);
  const kh::RunFolder plain = kh::open_run_folder(out, "m");
  EXPECT_FALSE(plain.continued);
  EXPECT_NE(plain.path, a.path);

  // torchrun: TORCHELASTIC_RUN_ID is the identity, except its default "none".
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "1");
  env.set("TORCHELASTIC_RUN_ID", "none");
  EXPECT_EQ(kd::restart_count(), 1);
  EXPECT_EQ(kd::run_id(), std::nullopt);
  EXPECT_FALSE(kh::open_run_folder(out, "m").continued) << "a restart without identity makes a new folder";
  env.set("TORCHELASTIC_RUN_ID", "job-a");
  EXPECT_EQ(kh::open_run_folder(out, "m").path, a.path);
  env.set("TORCHELASTIC_RESTART_COUNT", "x");
  EXPECT_NE(error_of([] { kd::restart_count(); }).find("TORCHELASTIC_RESTART_COUNT='x' is not an integer"),
            std::string::npos);
  std::system(("rm -rf " + out).c_str());
}

// Two starts of one --rdzv_id (the docs' "job7" run twice, or two jobs at once): a restart
// continues only the folder of its own start, never the other's, whichever is newer.
TEST(RunFolderTest, ARestartNeverContinuesAnotherStartOfItsId) {
  ScopedEnv env;
  env.set("TORCHELASTIC_RUN_ID", std::nullopt);
  env.set("KINDLING_PARALLEL_CHILD", std::nullopt);
  const kindling::testing::TempDir out_folder("run-folder");
  const std::string out = out_folder.path();
  as_kindling_run_worker(env, "job7", 0, "start-1");
  EXPECT_EQ(kd::run_instance(), std::optional<std::string>("start-1"));
  const kh::RunFolder first = kh::open_run_folder(out, "m");
  EXPECT_EQ(marker_of(first.path), "job7");
  EXPECT_EQ(marker_of(first.path, 1), "start-1");

  // The second start's first attempt failed before it made a folder.
  as_kindling_run_worker(env, "job7", 1, "start-2");
  const kh::RunFolder second = kh::open_run_folder(out, "m");
  EXPECT_FALSE(second.continued) << "a new job with a finished job's id continued " << first.path;
  EXPECT_NE(second.path, first.path);
  EXPECT_EQ(marker_of(second.path, 1), "start-2");
  as_kindling_run_worker(env, "job7", 2, "start-2");
  EXPECT_EQ(kh::open_run_folder(out, "m").path, second.path);
  as_kindling_run_worker(env, "job7", 1, "start-1");  // the older start, still running
  EXPECT_EQ(kh::open_run_folder(out, "m").path, first.path) << "each start keeps its own folder";

  // A token left in a shell is no token; torchrun gives none, and then continues no folder
  // that a start with a token made.
  env.set("KINDLING_RUN", std::nullopt);
  EXPECT_EQ(kd::run_instance(), std::nullopt);
  env.set("TORCHELASTIC_RUN_ID", "job7");
  EXPECT_EQ(kd::run_instance(), std::nullopt);
  EXPECT_FALSE(kh::open_run_folder(out, "m").continued);
  std::system(("rm -rf " + out).c_str());
}
