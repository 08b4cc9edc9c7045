// A store whose waits end when the world being made is given up (see abandonable_store.h).
#include "dist/backends/c10d/abandonable_store.h"

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace kindling {
namespace dist {
namespace detail {

AbandonableStore::AbandonableStore(c10::intrusive_ptr<c10d::Store> inner, std::shared_ptr<std::atomic<bool>> given_up)
    : StoreBase(inner->getTimeout()), inner_(std::move(inner)), given_up_(std::move(given_up)) {}

void AbandonableStore::refuse_if_given_up() const {
  if (given_up_ && given_up_->load())
    throw std::runtime_error("the world being made was given up for a newer rendezvous round");
}

void AbandonableStore::wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    refuse_if_given_up();
    if (inner_->check(keys)) return;
    if (timeout.count() > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      // The last stretch is the store's own wait: its timeout error, as without this store.
      if (left <= pause) return inner_->wait(keys, std::max(left, std::chrono::milliseconds(1)));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

void AbandonableStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  refuse_if_given_up();
  inner_->set(key, value);
}

std::vector<uint8_t> AbandonableStore::compareSet(const std::string& key, const std::vector<uint8_t>& current,
                                                  const std::vector<uint8_t>& desired) {
  refuse_if_given_up();
  return inner_->compareSet(key, current, desired);
}

std::vector<uint8_t> AbandonableStore::get(const std::string& key) {
  wait_for({key}, timeout_);
  return inner_->get(key);
}

int64_t AbandonableStore::add(const std::string& key, int64_t value) {
  refuse_if_given_up();
  return inner_->add(key, value);
}

bool AbandonableStore::deleteKey(const std::string& key) {
  refuse_if_given_up();
  return inner_->deleteKey(key);
}

bool AbandonableStore::check(const std::vector<std::string>& keys) {
  refuse_if_given_up();
  return inner_->check(keys);
}

int64_t AbandonableStore::getNumKeys() {
  refuse_if_given_up();
  return inner_->getNumKeys();
}

void AbandonableStore::wait(const std::vector<std::string>& keys) { wait_for(keys, timeout_); }

void AbandonableStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  wait_for(keys, timeout);
}

void AbandonableStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  inner_->setTimeout(timeout);
}

c10::intrusive_ptr<c10d::Store> AbandonableStore::clone_store() {
  return c10::make_intrusive<AbandonableStore>(clone_of(inner_), given_up_);
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
