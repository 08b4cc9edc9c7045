#pragma once
// Internal to kindling/engine/engine.h: the data an Engine runs over, behind one interface
// that can start any pass over the data at any batch (what exact resume needs). Not part of
// the API; may change.

#include <any>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "kindling/data/loader.h"
#include "kindling/export.h"

namespace kindling {
namespace engine {
namespace detail {

/// How a pass's batches divide the data among ranks: what a run resumed at another world size
/// compares with the state it loads (Engine::load_state_dict's "data_sharding").
struct Sharding {
  int64_t replicas = 1;               ///< ranks that share each pass (a distributed sampler's num_replicas)
  int64_t samples_per_iteration = 0;  ///< samples one iteration takes over all of them (the global batch)
  bool operator==(const Sharding& o) const {
    return replicas == o.replicas && samples_per_iteration == o.samples_per_iteration;
  }
  bool operator!=(const Sharding& o) const { return !(*this == o); }
};

class KINDLING_API DataSource {
 public:
  virtual ~DataSource() = default;
  /// How the data is sharded, when known (a kindling DataLoader); else nullopt.
  virtual std::optional<Sharding> sharding() { return std::nullopt; }
  /// Batches in one pass, when known.
  virtual std::optional<int64_t> size() = 0;
  /// Begins pass `pass` (0-based) positioned before its batch `offset`.
  virtual void start(int64_t pass, int64_t offset) = 0;
  /// Puts the next batch of the pass in `out`; false when the pass is over.
  virtual bool next(std::any& out) = 0;
};

/// A kindling DataLoader: the pass is the loader's epoch; the start skips batches without
/// loading them. The lvalue form uses the loader in place; the rvalue form owns it.
KINDLING_API std::shared_ptr<DataSource> make_data_source(data::DataLoader& loader);
KINDLING_API std::shared_ptr<DataSource> make_data_source(data::DataLoader&& loader);

template <typename T, typename = void>
struct HasSize : std::false_type {};
template <typename T>
struct HasSize<T, std::void_t<decltype(std::size(std::declval<T&>()))>> : std::true_type {};

/// Any range (std::begin / std::end); advanced element by element to an offset.
template <typename Range>
class RangeSource : public DataSource {
 public:
  explicit RangeSource(Range* range) : range_(range) {}
  explicit RangeSource(std::shared_ptr<Range> owned) : owned_(std::move(owned)), range_(owned_.get()) {}

  std::optional<int64_t> size() override {
    if constexpr (HasSize<Range>::value) {
      return static_cast<int64_t>(std::size(*range_));
    } else {
      return std::nullopt;
    }
  }
  void start(int64_t, int64_t offset) override {
    it_.emplace(std::begin(*range_));
    for (int64_t i = 0; i < offset && *it_ != std::end(*range_); ++i) ++*it_;
  }
  bool next(std::any& out) override {
    if (*it_ == std::end(*range_)) return false;
    out = *(*it_);
    ++*it_;
    return true;
  }

 private:
  std::shared_ptr<Range> owned_;
  Range* range_;
  std::optional<decltype(std::begin(std::declval<Range&>()))> it_;
};

template <typename Data>
std::shared_ptr<DataSource> make_data_source(Data&& data) {
  using Range = std::remove_reference_t<Data>;
  if constexpr (std::is_lvalue_reference<Data>::value) {
    return std::make_shared<RangeSource<Range>>(&data);
  } else {
    return std::make_shared<RangeSource<Range>>(std::make_shared<Range>(std::move(data)));
  }
}

}  // namespace detail
}  // namespace engine
}  // namespace kindling
