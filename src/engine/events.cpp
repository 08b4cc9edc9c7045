// Events and their filters (every / once / before / after / predicate), as ignite's.
#include "kindling/engine/events.h"

#include <algorithm>
#include <atomic>
#include <optional>

#include "kindling/error.h"

namespace kindling {
namespace engine {

struct Event::Filter {
  enum class Kind { kCounting, kOnce, kPredicate };
  Kind kind = Kind::kCounting;
  int64_t every = 1;
  std::optional<int64_t> before, after;
  std::vector<int64_t> once;
  std::function<bool(const Engine&, int64_t)> predicate;
};

namespace {

// Ids of user-defined events count up from here; built-ins are below.
std::atomic<int> g_next_custom_id{1000};

}  // namespace

Event::Event(int id, const char* name, EventCounter counter)
    : id_(id), name_(std::make_shared<const std::string>(name)), counter_(counter) {}

Event Event::custom(const std::string& name) {
  KINDLING_CHECK(!name.empty(), "kindling::engine::Event::custom: the event needs a non-empty name");
  Event e(g_next_custom_id.fetch_add(1), "", EventCounter::kOwn);
  e.name_ = std::make_shared<const std::string>(name);
  return e;
}

Event Event::with(std::shared_ptr<const Filter> filter) const {
  Event e = *this;
  e.filter_ = std::move(filter);
  return e;
}

namespace {

void check_filterable(const Event& e, const char* what) {
  KINDLING_CHECK(e.counter() != EventCounter::kNone, "kindling::engine::Event::", what, ": ", e.name(),
                 " has no counter to filter on (it fires at most once per run); attach the handler without a "
                 "filter");
}

}  // namespace

Event Event::every(int64_t n) const {
  check_filterable(*this, "every");
  KINDLING_CHECK(n >= 1, "kindling::engine::Event::every: argument should be integer and greater than zero, got ", n);
  KINDLING_CHECK(!filter_ || filter_->kind == Filter::Kind::kCounting, "kindling::engine::", to_string(),
                 ".every: only one of the filters should be specified, except before, after and every");
  auto f = std::make_shared<Filter>(filter_ ? *filter_ : Filter());
  f->every = n;
  return with(std::move(f));
}

Event Event::once(int64_t n) const { return once(std::vector<int64_t>{n}); }

Event Event::once(std::vector<int64_t> ns) const {
  check_filterable(*this, "once");
  KINDLING_CHECK(!ns.empty(), "kindling::engine::Event::once: the list of counter values must not be empty");
  for (int64_t n : ns) {
    KINDLING_CHECK(n >= 1, "kindling::engine::Event::once: argument should be a positive integer, got ", n);
  }
  KINDLING_CHECK(!filter_, "kindling::engine::", to_string(),
                 ".once: only one of the filters should be specified, except before, after and every");
  auto f = std::make_shared<Filter>();
  f->kind = Filter::Kind::kOnce;
  std::sort(ns.begin(), ns.end());
  f->once = std::move(ns);
  return with(std::move(f));
}

Event Event::before(int64_t n) const {
  check_filterable(*this, "before");
  KINDLING_CHECK(n >= 0, "kindling::engine::Event::before: argument should be integer and positive, got ", n);
  KINDLING_CHECK(!filter_ || filter_->kind == Filter::Kind::kCounting, "kindling::engine::", to_string(),
                 ".before: only one of the filters should be specified, except before, after and every");
  auto f = std::make_shared<Filter>(filter_ ? *filter_ : Filter());
  f->before = n;
  return with(std::move(f));
}

Event Event::after(int64_t n) const {
  check_filterable(*this, "after");
  KINDLING_CHECK(n >= 0, "kindling::engine::Event::after: argument should be integer and positive, got ", n);
  KINDLING_CHECK(!filter_ || filter_->kind == Filter::Kind::kCounting, "kindling::engine::", to_string(),
                 ".after: only one of the filters should be specified, except before, after and every");
  auto f = std::make_shared<Filter>(filter_ ? *filter_ : Filter());
  f->after = n;
  return with(std::move(f));
}

Event Event::filter(std::function<bool(const Engine&, int64_t)> predicate) const {
  check_filterable(*this, "filter");
  KINDLING_CHECK(static_cast<bool>(predicate), "kindling::engine::Event::filter: the predicate is empty");
  KINDLING_CHECK(!filter_, "kindling::engine::", to_string(),
                 ".filter: only one of the filters should be specified, except before, after and every");
  auto f = std::make_shared<Filter>();
  f->kind = Filter::Kind::kPredicate;
  f->predicate = std::move(predicate);
  return with(std::move(f));
}

bool Event::passes(const Engine& engine, int64_t c) const {
  if (!filter_) return true;
  const Filter& f = *filter_;
  switch (f.kind) {
    case Filter::Kind::kOnce: return std::binary_search(f.once.begin(), f.once.end(), c);
    case Filter::Kind::kPredicate: return f.predicate(engine, c);
    case Filter::Kind::kCounting: {
      if (f.before && c >= *f.before) return false;
      if (f.after && c <= *f.after) return false;
      if (f.every == 1) return true;
      if (!f.before && !f.after) return c % f.every == 0;
      // ignite counts `every` from the first value after `after` when a bound is given.
      return (c - f.after.value_or(0) - 1) % f.every == 0;
    }
  }
  return true;
}

std::string Event::to_string() const {
  if (!filter_) return name();
  const Filter& f = *filter_;
  std::string args;
  auto add = [&](const std::string& part) { args += (args.empty() ? "" : ", ") + part; };
  switch (f.kind) {
    case Filter::Kind::kOnce: {
      std::string list;
      for (int64_t n : f.once) list += (list.empty() ? "" : ", ") + std::to_string(n);
      add(f.once.size() == 1 ? "once=" + list : "once=[" + list + "]");
      break;
    }
    case Filter::Kind::kPredicate: add("filter=<predicate>"); break;
    case Filter::Kind::kCounting:
      if (f.every != 1) add("every=" + std::to_string(f.every));
      if (f.before) add("before=" + std::to_string(*f.before));
      if (f.after) add("after=" + std::to_string(*f.after));
      break;
  }
  return name() + "(" + args + ")";
}

const Event Events::STARTED(1, "STARTED", EventCounter::kEpoch);
const Event Events::EPOCH_STARTED(2, "EPOCH_STARTED", EventCounter::kEpoch);
const Event Events::GET_BATCH_STARTED(3, "GET_BATCH_STARTED", EventCounter::kIteration);
const Event Events::GET_BATCH_COMPLETED(4, "GET_BATCH_COMPLETED", EventCounter::kIteration);
const Event Events::ITERATION_STARTED(5, "ITERATION_STARTED", EventCounter::kIteration);
const Event Events::ITERATION_COMPLETED(6, "ITERATION_COMPLETED", EventCounter::kIteration);
const Event Events::DATALOADER_STOP_ITERATION(7, "DATALOADER_STOP_ITERATION", EventCounter::kNone);
const Event Events::EXCEPTION_RAISED(8, "EXCEPTION_RAISED", EventCounter::kNone);
const Event Events::TERMINATE_SINGLE_EPOCH(9, "TERMINATE_SINGLE_EPOCH", EventCounter::kNone);
const Event Events::EPOCH_COMPLETED(10, "EPOCH_COMPLETED", EventCounter::kEpoch);
const Event Events::TERMINATE(11, "TERMINATE", EventCounter::kNone);
const Event Events::COMPLETED(12, "COMPLETED", EventCounter::kEpoch);
const Event Events::INTERRUPT(13, "INTERRUPT", EventCounter::kNone);

}  // namespace engine
}  // namespace kindling
