#pragma once
// A store whose waits end when the world being made with it is given up (live recovery: the
// launcher announced a newer round, src/dist/live_round.h). The engine's rendezvous blocks in
// the store's waits for ranks that may never come; a world given up leaves that wait on a
// thread of its own, and this store ends it within 50 ms, so that the thread unwinds while the
// process runs on instead of at its exit (where its destructors would race the process's).
// 2.x's extended API (append, multiGet, multiSet) is left to c10d::Store's own, which goes
// through get() and set() here.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "dist/backends/c10d/c10d_compat.h"

namespace kindling {
namespace dist {
namespace detail {

/// The store of a world being made that live recovery may give up (start_c10d_world).
class AbandonableStore : public StoreBase<AbandonableStore> {
 public:
  /// Forwards to `inner`; once `given_up` is set every operation throws std::runtime_error
  /// ("the world being made was given up"), and a blocking one (get, wait) ends
  /// with that error within 50 ms: it waits by polling `inner`'s check().
  AbandonableStore(c10::intrusive_ptr<c10d::Store> inner, std::shared_ptr<std::atomic<bool>> given_up);

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& current,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;
  /// A store of the same kind over a second handle to `inner` (c10d 2.x's clone()).
  c10::intrusive_ptr<c10d::Store> clone_store();

 private:
  // Throws when the world was given up.
  void refuse_if_given_up() const;
  // Waits until every key of `keys` is set, up to `timeout` (kNoTimeout-like 0: no limit).
  void wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  c10::intrusive_ptr<c10d::Store> inner_;
  std::shared_ptr<std::atomic<bool>> given_up_;
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
