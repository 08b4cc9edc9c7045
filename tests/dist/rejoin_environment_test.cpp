// kindling::dist::rejoin while other threads of the process ask kindling who they are (issue 63):
// the environment is shared by every thread, and POSIX leaves a getenv that runs while another
// thread's setenv or unsetenv changes it undefined (glibc may free or move the array it reads).
// This executable replaces getenv, setenv and unsetenv (its own definitions come before the C
// library's for every library of the process, libkindling's included): a getenv of a reader
// thread that runs while a setenv or unsetenv of any thread is under way is counted. Each write
// lasts 20 us longer than it would, so that an overlap the program allows is seen in a few
// rounds. Its own executable: the replacement must not reach the other tests.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kindling/dist/launch_env.h"
#include "kindling/dist/live.h"
#include "common/round.h"
#include "support/env.h"
#include "supervisor/process/supervisor.h"

extern char** environ;

namespace {

std::atomic<int> g_writing{0};           // setenv/unsetenv calls under way, any thread
std::atomic<int> g_reading{0};           // getenv calls of reader threads under way
std::atomic<long> g_reads{0};            // getenv calls of reader threads
std::atomic<long> g_overlaps{0};         // ... that ran while the environment was written
std::atomic<long> g_round_overlaps{0};   // ... while a variable only a new round sets was written
std::atomic<bool> g_widen{false};        // writes last 20 us longer
thread_local bool t_reader = false;

// Variables that initialize() never set before live recovery: written only for a new round.
bool round_only(const char* name) {
  for (const char* n : {"ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "KINDLING_LIVE_ROUND"})
    if (std::strcmp(name, n) == 0) return true;
  return false;
}

template <typename Write>
int counted_write(const char* name, Write write) {
  g_writing.fetch_add(1);
  if (g_reading.load() > 0) {
    g_overlaps.fetch_add(1);
    if (name != nullptr && round_only(name)) g_round_overlaps.fetch_add(1);
  }
  if (g_widen.load()) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  const int result = write();
  g_writing.fetch_sub(1);
  return result;
}

}  // namespace

extern "C" {

// The C library's getenv, rewritten: no symbol lookup (it may run before main).
char* getenv(const char* name) noexcept {
  const bool reader = t_reader;
  if (reader) {
    g_reading.fetch_add(1);
    g_reads.fetch_add(1);
    if (g_writing.load() > 0) g_overlaps.fetch_add(1);
  }
  char* found = nullptr;
  const std::size_t length = std::strlen(name);
  for (char** e = environ; e != nullptr && *e != nullptr && found == nullptr; ++e)
    if (std::strncmp(*e, name, length) == 0 && (*e)[length] == '=') found = *e + length + 1;
  if (reader) g_reading.fetch_sub(1);
  return found;
}

int setenv(const char* name, const char* value, int overwrite) noexcept {
  using Real = int (*)(const char*, const char*, int);
  static const auto real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "setenv"));
  return counted_write(name, [&] { return real(name, value, overwrite); });
}

int unsetenv(const char* name) noexcept {
  using Real = int (*)(const char*);
  static const auto real = reinterpret_cast<Real>(::dlsym(RTLD_NEXT, "unsetenv"));
  return counted_write(name, [&] { return real(name); });
}

}  // extern "C"

namespace {

namespace kd = kindling::dist;

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path + ".new") << text;
  std::rename((path + ".new").c_str(), path.c_str());
}

// What kindling-run's agent does for round `round` (supervisor/live_channel.h): the layout of a
// world of one process, then the announcement.
void publish_round(const std::string& folder, int round, int restarts, int port) {
  kindling::detail::Round layout;
  layout.round = round;
  layout.restarts = restarts;
  layout.master_addr = "127.0.0.1";
  layout.master_port = port;
  layout.hosts = "localhost";
  layout.instance = "test";
  write_file(folder + "/round", kindling::detail::encode_round(layout, '\n'));
  write_file(folder + "/announce", std::to_string(round) + "\n");
}

// Asks kindling, in a loop, what a data loader, a logger's sender or ZeRO's thread may ask.
void read_identity(const std::atomic<bool>& stop, std::atomic<long>& calls) {
  t_reader = true;
  while (!stop.load()) {
    try {
      (void)kd::detect_launch_environment();
      (void)kd::restart_count();
      (void)kd::new_round_announced();
      (void)kd::live_recovery_enabled();
    } catch (const std::exception&) {
      // an inconsistent environment (a half-written one) is no concern of this count
    }
    calls.fetch_add(1);
  }
}

TEST(RejoinEnvironment, NoReaderThreadReadsWhileRejoinWritesTheEnvironment) {
  char pattern[] = "/tmp/kindling-rejoin-env-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string folder = pattern;
  kindling::testing::ScopedEnv env;
  for (const auto& [name, value] : {std::pair<const char*, const char*>{"RANK", "0"},
                                    {"WORLD_SIZE", "1"},
                                    {"LOCAL_RANK", "0"},
                                    {"LOCAL_WORLD_SIZE", "1"},
                                    {"MASTER_ADDR", "127.0.0.1"},
                                    {"MASTER_PORT", "29500"},
                                    {"TORCHELASTIC_RESTART_COUNT", "0"},
                                    {"KINDLING_LIVE_ROUND", "0"}})
    env.set(name, value);
  env.set("KINDLING_LIVE_DIR", folder);
  g_widen = true;
  std::atomic<bool> stop{false};
  std::atomic<long> calls{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) readers.emplace_back(read_identity, std::cref(stop), std::ref(calls));
  constexpr int kRounds = 200;
  const auto start = std::chrono::steady_clock::now();
  std::string failure;
  for (int round = 1; round <= kRounds && failure.empty(); ++round) {
    publish_round(folder, round, round % 3, kindling::supervisor::find_free_port());
    try {
      const kd::LiveWorld world = kd::rejoin("gloo", kd::InitOptions().timeout(std::chrono::seconds(30)),
                                             "the test's round", std::chrono::seconds(30));
      if (world.round != round || world.restarts != round % 3 || world.rank != 0 || world.world_size != 1)
        failure = "rejoin of round " + std::to_string(round) + " made round " + std::to_string(world.round) +
                  " restarts " + std::to_string(world.restarts) + " rank " + std::to_string(world.rank) + " of " +
                  std::to_string(world.world_size);
    } catch (const std::exception& e) {
      failure = "rejoin of round " + std::to_string(round) + " threw: " + e.what();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The environment a program of the launcher reads after a rejoin says the new round (live.h).
  const char* live_round = std::getenv("KINDLING_LIVE_ROUND");
  const std::string round_seen = live_round ? live_round : "<unset>";
  stop = true;
  for (auto& t : readers) t.join();
  g_widen = false;
  kd::finalize();
  std::printf("%d rejoins in %.1f s; reader threads: %ld calls, %ld getenv; getenv during a write: %ld "
              "(%ld while a variable only a new round sets was written)\n",
              kRounds, seconds, calls.load(), g_reads.load(), g_overlaps.load(), g_round_overlaps.load());
  ASSERT_TRUE(failure.empty()) << failure;
  EXPECT_EQ(round_seen, std::to_string(kRounds)) << "KINDLING_LIVE_ROUND after the last rejoin";
  EXPECT_GT(g_reads.load(), kRounds) << "the reader threads hardly read: the count proves nothing";
  EXPECT_EQ(g_overlaps.load(), 0) << "a reader thread's getenv ran while the environment was being written "
                                  << g_overlaps.load() << " times (" << g_round_overlaps.load()
                                  << " while a new round's own variable was): kindling must not write the "
                                     "environment while its threads may read it";
  std::remove((folder + "/round").c_str());
  std::remove((folder + "/announce").c_str());
  std::remove((folder + "/taking_part").c_str());
  ::rmdir(folder.c_str());
}

}  // namespace
