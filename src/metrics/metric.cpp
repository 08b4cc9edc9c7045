// kindling::metrics::Metric: attaching to an engine per usage, the output convention, and
// the cross-rank reduction done at compute (ignite's sync_all_reduce).
#include "kindling/metrics/metric.h"

#include <ATen/ATen.h>

#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "kindling/engine/keep_alive.h"

namespace kindling {
namespace metrics {

using engine::Engine;
using engine::Event;
using engine::Events;
using engine::HandlerHandle;

struct Metric::Attachment {
  HandlerHandle started, updated;
  std::map<std::string, HandlerHandle> completed;  // by name
};

namespace {

struct Builtin {
  const char* name;
  UsageEvents events;
};

// The built-in usages' names and events, by Usage::builtin_ (read at run time, so that the
// constants need no other static object at initialisation).
const Builtin& builtin(int index) {
  static const Builtin table[] = {
      {"epoch_wise", {Events::EPOCH_STARTED, Events::ITERATION_COMPLETED, Events::EPOCH_COMPLETED}},
      {"running_epoch_wise", {Events::STARTED, Events::EPOCH_COMPLETED, Events::EPOCH_COMPLETED}},
      {"batch_wise", {Events::ITERATION_STARTED, Events::ITERATION_COMPLETED, Events::ITERATION_COMPLETED}},
      {"running_batch_wise", {Events::STARTED, Events::ITERATION_COMPLETED, Events::ITERATION_COMPLETED}},
      {"single_epoch_running_batch_wise",
       {Events::EPOCH_STARTED, Events::ITERATION_COMPLETED, Events::ITERATION_COMPLETED}},
  };
  return table[index];
}

// An event's place in Usage's order: its id, then its filter's identity.
std::pair<int, const void*> order_key(const Event& e) { return {e.id(), e.filter_key()}; }

}  // namespace

struct Usage::Custom {
  std::string name;
  UsageEvents events;
};

const Usage Usage::kEpochWise{0};
const Usage Usage::kRunningEpochWise{1};
const Usage Usage::kBatchWise{2};
const Usage Usage::kRunningBatchWise{3};
const Usage Usage::kSingleEpochRunningBatchWise{4};

Usage::Usage(std::string name, UsageEvents events) {
  KINDLING_CHECK(!name.empty(), "kindling::metrics::Usage: the name of a usage must not be empty");
  custom_ = std::make_shared<const Custom>(Custom{std::move(name), std::move(events)});
}

const char* Usage::name() const { return custom_ ? custom_->name.c_str() : builtin(builtin_).name; }

UsageEvents Usage::events() const { return custom_ ? custom_->events : builtin(builtin_).events; }

bool Usage::operator==(const Usage& other) const {
  if (builtin_ != other.builtin_) return false;
  if (!custom_ || !other.custom_) return custom_ == other.custom_;
  const UsageEvents &a = custom_->events, &b = other.custom_->events;
  return custom_->name == other.custom_->name && a.started == b.started && a.updated == b.updated &&
         a.completed == b.completed;
}

bool Usage::operator<(const Usage& other) const {
  if (builtin_ != other.builtin_) {  // the built-in ones first, in their order; then the custom ones (-1)
    return static_cast<unsigned>(builtin_) < static_cast<unsigned>(other.builtin_);
  }
  if (!custom_ || !other.custom_) return false;  // the same built-in usage
  const UsageEvents &a = custom_->events, &b = other.custom_->events;
  return std::make_tuple(std::string_view(custom_->name), order_key(a.started), order_key(a.updated),
                         order_key(a.completed)) < std::make_tuple(std::string_view(other.custom_->name),
                                                                   order_key(b.started), order_key(b.updated),
                                                                   order_key(b.completed));
}

Usage BatchFiltered(const Event& iteration_completed) {
  KINDLING_CHECK(iteration_completed.same_event(Events::ITERATION_COMPLETED),
                 "kindling::metrics::BatchFiltered: the update event must be ITERATION_COMPLETED with a filter "
                 "(e.g. Events::ITERATION_COMPLETED.every(2)), got ",
                 iteration_completed.to_string());
  return Usage("batch_filtered", {Events::EPOCH_STARTED, iteration_completed, Events::EPOCH_COMPLETED});
}

const char* to_string(const Usage& usage) { return usage.name(); }

UsageEvents events_of(const Usage& usage) { return usage.events(); }

Metric::Metric(OutputTransform output_transform, c10::Device device)
    : output_transform_(std::move(output_transform)), device_(device) {}

Metric::~Metric() = default;

void Metric::attach(Engine& engine, const std::string& name, const Usage& usage) {
  std::shared_ptr<Metric> self = engine::keep_alive(*this, "kindling::metrics::" + this->name());
  KINDLING_CHECK(!name.empty(), "kindling::metrics::", this->name(), "::attach: the name must not be empty");
  const UsageEvents ev = events_of(usage);
  auto& slot = attachments_[engine.id()][usage];
  if (!slot) slot = std::make_shared<Attachment>();
  if (!slot->started.attached()) {
    slot->started = engine.add_event_handler(ev.started, [self](Engine& e) { self->started(e); });
  }
  if (!slot->updated.attached()) {
    slot->updated = engine.add_event_handler(ev.updated, [self](Engine& e) { self->iteration_completed(e); });
  }
  auto old = slot->completed.find(name);
  if (old != slot->completed.end() && old->second.attached()) old->second.remove();
  slot->completed[name] = engine.add_event_handler(ev.completed, [self, name](Engine& e) { self->completed(e, name); });
}

void Metric::detach(Engine& engine, const Usage& usage) {
  auto e = attachments_.find(engine.id());
  if (e == attachments_.end()) return;
  auto u = e->second.find(usage);
  if (u == e->second.end()) return;
  Attachment& a = *u->second;
  for (HandlerHandle* h : {&a.started, &a.updated}) {
    if (h->attached()) h->remove();
  }
  for (auto& kv : a.completed) {
    if (kv.second.attached()) {
      kv.second.remove();
      auto stored = engine.state().metrics.find(kv.first);
      if (stored == engine.state().metrics.end()) continue;
      // A named value's entries were stored under their own keys too (see completed()).
      if (stored->second.is_named()) {
        for (const auto& entry : stored->second.named_elements()) engine.state().metrics.erase(entry.first);
      }
      engine.state().metrics.erase(stored);
    }
  }
  e->second.erase(u);
  if (e->second.empty()) attachments_.erase(e);
}

bool Metric::is_attached(const Engine& engine, const Usage& usage) const {
  auto e = attachments_.find(engine.id());
  if (e == attachments_.end()) return false;
  auto u = e->second.find(usage);
  if (u == e->second.end()) return false;
  for (const auto& kv : u->second->completed) {
    if (engine.has_event_handler(kv.second)) return true;
  }
  return false;
}

std::vector<Usage> Metric::attached_usages(const Engine& engine) const {
  std::vector<Usage> usages;
  auto e = attachments_.find(engine.id());
  if (e == attachments_.end()) return usages;
  for (const auto& kv : e->second) {
    if (is_attached(engine, kv.first)) usages.push_back(kv.first);
  }
  return usages;
}

void Metric::started(Engine& engine) {
  // A metric restored by load_state_dict() keeps that state through the reset that opens the
  // run (or the epoch) which resumes in the middle, where the state was saved; an epoch that
  // starts at its beginning, or a fresh run, resets it as usual.
  const engine::State& s = engine.state();
  const bool mid_way =
      s.iteration > 0 && (!s.epoch_length || *s.epoch_length <= 0 || s.iteration > (s.epoch - 1) * *s.epoch_length);
  const bool keep = restored_ && mid_way;
  restored_ = false;
  if (!keep) reset();
}

void Metric::iteration_completed(Engine& engine) {
  at::NoGradGuard no_grad;
  const Value& output = engine.state().output;
  if (output_transform_) {
    update(output_transform_(output));
  } else {
    update(output);
  }
}

namespace {

// A tensor as State::metrics holds it: a 0-dim one as a number, others on the CPU.
Value metric_stored(const at::Tensor& t) {
  if (t.dim() == 0) return t.item<double>();
  return t.device().is_cpu() ? t : t.cpu();
}

}  // namespace

void Metric::completed(Engine& engine, const std::string& name) {
  Value result = compute();
  if (result.is_tensor()) result = metric_stored(result.tensor());
  if (result.is_named()) {
    // ignite's rule for a mapping: every entry also under its own key.
    std::map<std::string, at::Tensor> whole;
    std::string keys;
    for (const auto& kv : result.named_elements()) {
      whole.emplace(kv.first, kv.second.device().is_cpu() ? kv.second : kv.second.cpu());
      keys += (keys.empty() ? "" : ", ") + kv.first;
    }
    KINDLING_CHECK(!result.contains(name), "kindling::metrics::", this->name(), ": the name '", name,
                   "' it is attached under is also a key of its named value (", keys,
                   "), whose entries are stored under their own keys; attach it under another name");
    for (const auto& kv : whole) engine.state().metrics[kv.first] = metric_stored(kv.second);
    result = Value::named(std::move(whole));
  }
  engine.state().metrics[name] = std::move(result);
}

std::pair<at::Tensor, at::Tensor> Metric::y_pred_and_y(const Value& output) const {
  if (output.is_named()) {
    KINDLING_CHECK(output.contains("y_pred") && output.contains("y"), "kindling::metrics::", name(),
                   ": when the (transformed) engine output is named, it should contain the keys y_pred and y, but "
                   "it has ",
                   output.to_string(), "; set an output_transform");
    return {output["y_pred"], output["y"]};
  }
  KINDLING_CHECK(output.is_tuple() && output.size() >= 2, "kindling::metrics::", name(),
                 ": the (transformed) engine output should be the tuple {y_pred, y} or named tensors y_pred and y, "
                 "but it is ",
                 output.to_string(), "; set an output_transform");
  return {output[0], output[1]};
}

int64_t Metric::reduce(int64_t local, dist::ReduceOp op) const {
  if (dist::get_world_size() <= 1) return local;
  return dist::all_reduce(local, op);
}

namespace {

constexpr int64_t kMaxDims = 8;  // the shape row below has room for this many dimensions

// The value that leaves an accumulator unchanged under `op` (what an empty rank adds).
double identity_of(dist::ReduceOp op) {
  switch (op) {
    case dist::ReduceOp::kProduct: return 1.0;
    case dist::ReduceOp::kMin: return std::numeric_limits<double>::infinity();
    case dist::ReduceOp::kMax: return -std::numeric_limits<double>::infinity();
    default: return 0.0;
  }
}

bool is_extreme(dist::ReduceOp op) { return op == dist::ReduceOp::kMax || op == dist::ReduceOp::kMin; }

// The maximum or minimum over ranks of floating point values with a NaN anywhere giving NaN
// there (as torch.maximum): a backend's own max may drop a NaN or keep it depending on the
// order it combines the ranks, i.e. on which rank held it. One collective: the values with
// NaN as the identity, and beside them a mark (+1 for kMax, -1 for kMin) where a rank held NaN.
at::Tensor extreme_keeping_nan(const at::Tensor& local, dist::ReduceOp op) {
  const at::Tensor nan = local.isnan();
  const double mark = op == dist::ReduceOp::kMax ? 1.0 : -1.0;
  const at::Tensor both =
      dist::all_reduce(at::stack({local.masked_fill(nan, identity_of(op)), nan.to(local.scalar_type()) * mark}), op);
  return both[0].masked_fill(both[1] != 0, std::numeric_limits<double>::quiet_NaN());
}

// "(3, 4)" for a shape row [dims, size0, size1, ...].
std::string shape_text(const at::Tensor& row) {
  std::string out = "(";
  for (int64_t d = 0; d < row[0].item<int64_t>(); ++d)
    out += (d ? ", " : "") + std::to_string(row[d + 1].item<int64_t>());
  return out + ")";
}

}  // namespace

at::Tensor Metric::reduce(const at::Tensor& local, dist::ReduceOp op) const {
  if (dist::get_world_size() <= 1) return local;
  if (is_extreme(op) && at::isFloatingType(local.scalar_type())) return extreme_keeping_nan(local, op);
  return dist::all_reduce(local.clone(), op);
}

double Metric::reduce(double local, dist::ReduceOp op) const {
  if (dist::get_world_size() <= 1) return local;
  if (is_extreme(op)) return extreme_keeping_nan(at::scalar_tensor(local, at::kDouble), op).item<double>();
  return dist::all_reduce(local, op);
}

at::Tensor Metric::reduce_to_shape(const at::Tensor& local, bool seen, dist::ReduceOp op) const {
  KINDLING_CHECK(local.dim() <= kMaxDims, "kindling::metrics::", name(), ": accumulators of more than ", kMaxDims,
                 " dimensions are not supported, got ", local.sizes());
  // The ranks agree on the shape first: [dims, sizes...] of a rank that saw data, zeros otherwise.
  at::Tensor row = at::zeros({kMaxDims + 1}, at::kLong);
  if (seen) {
    row[0] = local.dim();
    for (int64_t d = 0; d < local.dim(); ++d) row[d + 1] = local.size(d);
  }
  const at::Tensor widest = reduce(row, dist::ReduceOp::kMax);
  const at::Tensor narrowest = reduce(seen ? row : widest.clone(), dist::ReduceOp::kMin);
  if (!at::equal(widest, narrowest)) {
    throw UsageError(detail::rank_prefix() + "kindling::metrics::" + name() +
                     ": the ranks' accumulators differ in shape (" + shape_text(narrowest) + " and " +
                     shape_text(widest) + " at least); every rank must give outputs of the same shape");
  }
  if (seen) return reduce(local, op);
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < widest[0].item<int64_t>(); ++d) shape.push_back(widest[d + 1].item<int64_t>());
  return reduce(at::full(shape, identity_of(op), local.options()), op);
}

}  // namespace metrics
}  // namespace kindling
