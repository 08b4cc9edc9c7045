#pragma once
// ShmAllreduce's heap (shm_allreduce.h, which holds it): the communication buffers
// (empty_comm_buffer) carved out of this rank's part of the MPI shared-memory window, and what
// becomes of the tensors still alive in it when the window goes. Knows nothing of the all-reduce.
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <vector>

namespace kindling {
namespace dist {
namespace detail {

// The communication-buffer heap in this rank's part of the window: first fit, 256-byte
// aligned blocks. Shared with the tensors' deleters, so it outlives the communicator.
struct ShmHeap {
  std::mutex mu;
  char* base = nullptr;
  std::int64_t capacity = 0;
  std::map<std::int64_t, std::int64_t> free;  // offset -> bytes
  std::map<std::int64_t, std::int64_t> used;
  std::map<std::int64_t, c10::weak_intrusive_ptr<c10::StorageImpl>> owners;  // the storage of each used block

  char* allocate(std::int64_t bytes) {
    bytes = std::max<std::int64_t>(256, (bytes + 255) / 256 * 256);
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < bytes) continue;
      const std::int64_t off = it->first, left = it->second - bytes;
      free.erase(it);
      if (left > 0) free.emplace(off + bytes, left);
      used.emplace(off, bytes);
      return base + off;
    }
    return nullptr;
  }
  void release(void* p) {
    std::lock_guard<std::mutex> lock(mu);
    auto u = used.find(static_cast<char*>(p) - base);
    if (u == used.end()) return;
    std::int64_t off = u->first, bytes = u->second;
    used.erase(u);
    owners.erase(off);
    auto next = free.lower_bound(off);
    if (next != free.end() && off + bytes == next->first) {
      bytes += next->second;
      next = free.erase(next);
    }
    if (next != free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += bytes;
        return;
      }
    }
    free.emplace(off, bytes);
  }
  // Before the window goes (finalize(), or the group's end): the tensors still alive in it (a
  // DDP model destroyed after finalize(), gradients that are its bucket views) get ordinary
  // memory holding their bytes, so that they stay valid. Swapping a storage's memory returns
  // its block to this heap (its deleter), hence no lock held meanwhile.
  void evacuate() {
    std::vector<c10::intrusive_ptr<c10::StorageImpl>> live;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& entry : owners) {
        if (auto storage = entry.second.lock()) live.push_back(std::move(storage));
      }
    }
    for (auto& storage : live) {
      const std::size_t bytes = storage->nbytes();
      c10::DataPtr copy = c10::GetCPUAllocator()->allocate(bytes);
      if (bytes > 0) std::memcpy(copy.get(), storage->data_ptr().get(), bytes);
      storage->set_data_ptr_noswap(std::move(copy));
    }
  }
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
