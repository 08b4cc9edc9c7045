#include "common/identity.h"

#include <atomic>
#include <cstdint>

namespace kindling {
namespace detail {
namespace {
// Rank in the low 32 bits, world size in the high ones; 0 (a world of size 0) = serial.
// One atomic, so that a reader never sees the rank of one model with the size of another.
std::atomic<std::uint64_t> g_identity{0};
// The launcher's reader (src/launch/launch_env.cpp); null until the library has loaded.
std::atomic<LauncherIdentity> g_launcher_identity{nullptr};
}  // namespace

void set_identity(int rank, int world_size) {
  g_identity.store((static_cast<std::uint64_t>(static_cast<std::uint32_t>(world_size)) << 32) |
                       static_cast<std::uint32_t>(rank),
                   std::memory_order_release);
}

void clear_identity() { g_identity.store(0, std::memory_order_release); }

std::optional<std::pair<int, int>> identity() {
  const std::uint64_t packed = g_identity.load(std::memory_order_acquire);
  const auto world_size = static_cast<int>(packed >> 32);
  if (world_size == 0) return std::nullopt;
  return std::make_pair(static_cast<int>(packed & 0xffffffffu), world_size);
}

void set_launcher_identity(LauncherIdentity reader) { g_launcher_identity.store(reader, std::memory_order_release); }

std::optional<std::pair<int, int>> process_identity() {
  if (auto model = identity()) return model;
  const LauncherIdentity reader = g_launcher_identity.load(std::memory_order_acquire);
  return reader != nullptr ? reader() : std::nullopt;
}

int process_rank() {
  const auto who = process_identity();
  return who ? who->first : 0;
}

}  // namespace detail
}  // namespace kindling
