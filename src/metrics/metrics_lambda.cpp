// MetricsLambda: a metric computed from other metrics, whose reset and update handlers it
// attaches (shared and counted per engine, event and dependency), and metric arithmetic.
#include "kindling/metrics/metrics_lambda.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <tuple>

#include "kindling/engine/keep_alive.h"

namespace kindling {
namespace metrics {

using engine::Engine;
using engine::Event;
using engine::Events;
using engine::HandlerHandle;

namespace {

// Whether `dep`, attached on its own (Metric::attach), resets (or updates) on this firing of
// `event` by its own handler (an event of the same id whose filter lets this firing through):
// a lambda's handler would repeat it.
bool handled_by_itself(const Metric& dep, const Engine& engine, const Event& event, bool reset) {
  const engine::State& s = engine.state();
  for (const Usage& u : dep.attached_usages(engine)) {
    const UsageEvents ev = u.events();
    const Event& own = reset ? ev.started : ev.updated;
    if (!own.same_event(event)) continue;
    if (own == event) return true;
    const int64_t counter = own.counter() == engine::EventCounter::kEpoch ? s.epoch : s.iteration;
    if (own.counter() == engine::EventCounter::kOwn || own.passes(engine, counter)) return true;
  }
  return false;
}

// (engine id, event id, the event's filter, reset (1) or update (0), dependency)
using Key = std::tuple<const void*, int, const void*, int, const Metric*>;

struct Shared {
  HandlerHandle handle;
  int users = 0;
  uint64_t serial = 0;  // tells a live entry from a stale one of a dead engine at the same address
};

std::mutex registry_mutex;
std::map<Key, Shared>& registry() {
  static std::map<Key, Shared> r;
  return r;
}
uint64_t next_serial = 1;

// One reset or update handler of a dependency, as held by one lambda: its key and serial.
using DepRegistration = std::pair<Key, uint64_t>;

DepRegistration acquire(Engine& engine, const Event& event, bool reset, const std::shared_ptr<Metric>& dep) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const Key key{engine.id(), event.id(), event.filter_key(), reset ? 1 : 0, dep.get()};
  Shared& s = registry()[key];
  if (!s.handle.attached()) {  // new, or left over from a dead engine
    if (reset) {
      s.handle = engine.add_event_handler(event, [dep, event](Engine& e) {
        if (!handled_by_itself(*dep, e, event, true)) dep->started(e);
      });
    } else {
      s.handle = engine.add_event_handler(event, [dep, event](Engine& e) {
        if (!handled_by_itself(*dep, e, event, false)) dep->iteration_completed(e);
      });
    }
    s.users = 0;
    s.serial = next_serial++;
  }
  ++s.users;
  return DepRegistration{key, s.serial};
}

void release(const DepRegistration& r) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(r.first);
  if (it == registry().end() || it->second.serial != r.second) return;
  if (--it->second.users > 0) return;
  if (it->second.handle.attached()) it->second.handle.remove();
  registry().erase(it);
}

bool live(const DepRegistration& r) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(r.first);
  return it != registry().end() && it->second.serial == r.second && it->second.handle.attached();
}

}  // namespace

struct MetricsLambda::Registration {
  DepRegistration dep;
};

MetricsLambda::MetricsLambda(Function f, std::vector<std::shared_ptr<Metric>> args)
    : Metric(OutputTransform(), c10::Device(c10::kCPU)), f_(std::move(f)), args_(std::move(args)) {
  KINDLING_CHECK(static_cast<bool>(f_), "kindling::metrics::MetricsLambda: the function is empty");
  for (std::size_t i = 0; i < args_.size(); ++i) {
    KINDLING_CHECK(args_[i] != nullptr, "kindling::metrics::MetricsLambda: argument ", i,
                   " is null; pass the metrics the function reads");
  }
  // Depth first through nested lambdas: each source once, its state under its first path.
  std::function<void(const std::vector<std::shared_ptr<Metric>>&, const std::string&)> walk =
      [&](const std::vector<std::shared_ptr<Metric>>& args, const std::string& prefix) {
        for (std::size_t i = 0; i < args.size(); ++i) {
          const std::string path = prefix + "args/" + std::to_string(i) + "/";
          if (auto lambda = std::dynamic_pointer_cast<MetricsLambda>(args[i])) {
            walk(lambda->args(), path);
          } else if (std::find(sources_.begin(), sources_.end(), args[i]) == sources_.end()) {
            sources_.push_back(args[i]);
            register_member_state(path, *args[i]);
          }
        }
      };
  walk(args_, "");
}

void MetricsLambda::reset() {
  for (const auto& a : args_) a->reset();
}

void MetricsLambda::update(const Value& output) {
  // Attached, the engine calls this and the dependencies' own handlers update them.
  if (!registrations_.empty()) return;
  // By hand: each source once, through its own output_transform, as its attached handler would.
  for (const auto& source : sources_) {
    const OutputTransform& transform = source->output_transform();
    source->update(transform ? transform(output) : output);
  }
}

Value MetricsLambda::compute() {
  std::vector<Value> values;
  values.reserve(args_.size());
  for (const auto& a : args_) {
    Value v = a->compute();
    if (v.is_tensor() && !v.tensor().device().is_cpu()) v = Value(v.tensor().cpu());
    values.push_back(std::move(v));
  }
  return f_(values);
}

void MetricsLambda::attach(Engine& engine, const std::string& name, const Usage& usage) {
  engine::keep_alive(*this, "kindling::metrics::MetricsLambda");
  KINDLING_CHECK(!name.empty(), "kindling::metrics::MetricsLambda::attach: the name must not be empty");
  auto& by_usage = registrations_[engine.id()];
  auto found = by_usage.find(usage);
  if (found != by_usage.end()) {
    const bool all_live = std::all_of(found->second.begin(), found->second.end(),
                                      [](const std::shared_ptr<Registration>& r) { return live(r->dep); });
    if (!all_live) by_usage.erase(found);  // an engine that died at this address: start again
  }
  if (by_usage.count(usage) == 0) {
    const UsageEvents ev = events_of(usage);
    std::vector<std::shared_ptr<Registration>> held;
    for (const auto& dep : sources_) {
      held.push_back(std::make_shared<Registration>(Registration{acquire(engine, ev.started, true, dep)}));
      held.push_back(std::make_shared<Registration>(Registration{acquire(engine, ev.updated, false, dep)}));
    }
    by_usage[usage] = std::move(held);
  }
  Metric::attach(engine, name, usage);
}

void MetricsLambda::detach(Engine& engine, const Usage& usage) {
  auto e = registrations_.find(engine.id());
  if (e != registrations_.end()) {
    auto u = e->second.find(usage);
    if (u != e->second.end()) {
      for (const auto& r : u->second) release(r->dep);
      e->second.erase(u);
    }
    if (e->second.empty()) registrations_.erase(e);
  }
  Metric::detach(engine, usage);
}

Value apply(const Value& a, const Value& b, char op) {
  KINDLING_CHECK((a.is_number() || a.is_tensor()) && (b.is_number() || b.is_tensor()),
                 "kindling::metrics::MetricsLambda: arithmetic needs numbers or tensors, got ", a.to_string(), " ", op,
                 " ", b.to_string(), "; compute such values in a MetricsLambda function of your own");
  KINDLING_CHECK(op == '+' || op == '-' || op == '*' || op == '/', "kindling::metrics::apply: unknown operation '", op,
                 "', expected one of + - * /");
  if (a.is_number() && b.is_number()) {
    const double x = a.number(), y = b.number();
    switch (op) {
      case '+': return x + y;
      case '-': return x - y;
      case '*': return x * y;
      default: return x / y;
    }
  }
  // A number takes part in type promotion as a Python scalar does (a "wrapped number").
  const at::Tensor x = a.is_number() ? at::native::wrapped_scalar_tensor(a.number()) : a.tensor();
  const at::Tensor y = b.is_number() ? at::native::wrapped_scalar_tensor(b.number()) : b.tensor();
  switch (op) {
    case '+': return at::add(x, y);
    case '-': return at::sub(x, y);
    case '*': return at::mul(x, y);
    default: return at::div(x, y);
  }
}

namespace {

std::shared_ptr<Metric> checked(const std::shared_ptr<Metric>& m, char op) {
  KINDLING_CHECK(m != nullptr, "kindling::metrics: operator", op, " got a null metric");
  return m;
}

std::shared_ptr<MetricsLambda> binary(const std::shared_ptr<Metric>& a, const std::shared_ptr<Metric>& b, char op) {
  return std::make_shared<MetricsLambda>([op](const std::vector<Value>& v) { return apply(v[0], v[1], op); },
                                         std::vector<std::shared_ptr<Metric>>{checked(a, op), checked(b, op)});
}

std::shared_ptr<MetricsLambda> with_number(const std::shared_ptr<Metric>& m, double c, bool metric_first, char op) {
  return std::make_shared<MetricsLambda>(
      [op, c, metric_first](const std::vector<Value>& v) {
        return metric_first ? apply(v[0], Value(c), op) : apply(Value(c), v[0], op);
      },
      std::vector<std::shared_ptr<Metric>>{checked(m, op)});
}

}  // namespace

#define KINDLING_METRIC_OPERATOR(OP)                                                                               \
  std::shared_ptr<MetricsLambda> operator OP(const std::shared_ptr<Metric>& a, const std::shared_ptr<Metric>& b) { \
    return binary(a, b, (#OP)[0]);                                                                                 \
  }                                                                                                                \
  std::shared_ptr<MetricsLambda> operator OP(const std::shared_ptr<Metric>& a, double b) {                         \
    return with_number(a, b, true, (#OP)[0]);                                                                      \
  }                                                                                                                \
  std::shared_ptr<MetricsLambda> operator OP(double a, const std::shared_ptr<Metric>& b) {                         \
    return with_number(b, a, false, (#OP)[0]);                                                                     \
  }
KINDLING_METRIC_OPERATOR(+)
KINDLING_METRIC_OPERATOR(-)
KINDLING_METRIC_OPERATOR(*)
KINDLING_METRIC_OPERATOR(/)
#undef KINDLING_METRIC_OPERATOR

}  // namespace metrics
}  // namespace kindling
