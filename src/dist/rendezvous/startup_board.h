#pragma once
// The startup board: what the ranks of one world tell each other while it is being made,
// before the engine connects them. A rank that fails while starting (an interface that does
// not exist, a rank number or world size that clashes with another rank's) writes its cause
// there, and every other rank, blocked in the engine's rendezvous, reads it from a second
// connection within half a second and ends with that cause instead of waiting for the whole
// rendezvous timeout.
//
// Keys live under "kindling/start/<restart count>.<initialize count>/", so that a store that
// outlives one world (torchrun's agent store across restarts, a file store across a
// finalize and a new initialize) never shows an earlier world's entries. Only kindling ranks
// write there: a Python rank of a mixed job neither claims nor reads.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <mutex>
#include <string>

namespace kindling {
namespace dist {
namespace detail {

class StartupBoard {
 public:
  /// `store` is the rendezvous store (this rank's main connection); `watch` a second
  /// connection to it for watch(), or null (a file store: then watch() finds nothing).
  /// `place` is this rank's own_place(); `origin` what told this rank its place in the world
  /// (said to a rank left waiting). Local; never throws.
  StartupBoard(c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<c10d::Store> watch, int rank, int world_size,
               std::string place, std::string origin);

  /// `origin` as given. Never throws.
  const std::string& origin() const { return origin_; }

  /// Claims this rank's number and the world size. When another process already holds this
  /// rank, or another rank was started for another world size, publishes the clash for every
  /// rank and throws kindling::UsageError naming both ranks' hosts and values. Store errors
  /// propagate as the engine's exceptions. Every kindling rank calls it once, before the
  /// engine connects the ranks.
  void claim();

  /// Publishes `cause` as the reason this world cannot start ("rank R on host H: ..."); the
  /// first cause published stays. Then waits a second, so that the ranks watching (every
  /// half second) read it before this process, perhaps the store's host, ends. Never throws
  /// (a store that is gone cannot be told).
  void publish_failure(const std::string& cause);

  /// The cause another rank published, through the second connection; empty when none, when
  /// there is no second connection or when the store cannot be read. Never throws. Safe from another thread than
  /// claim().
  std::string watch();

 private:
  std::string key(const std::string& name) const;

  c10::intrusive_ptr<c10d::Store> store_, watch_;
  std::mutex watch_mu_;
  int rank_, world_size_;
  std::string place_, origin_, generation_;
};

}  // namespace detail
}  // namespace dist
}  // namespace kindling
