// kindling's DistributedDataParallel: bucketed gradient all-reduce overlapped with
// backward (see include/kindling/nn/ddp.h).
#include "kindling/nn/ddp.h"
#include "kindling/nn/batchnorm.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <chrono>
#include <mutex>
#include <sstream>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/dist/hierarchy.h"
#include "kindling/dist/same_settings.h"
#include "kindling/error.h"
#include "nn/ddp_buckets.h"
#include "nn/ddp_state.h"

namespace kindling {
namespace nn {

namespace {

// The options that change what the ranks exchange (the hierarchical hook is chosen later).
dist::Settings exchanged_settings(const DdpOptions& o) {
  std::ostringstream cap;
  cap << o.bucket_cap_mb();
  std::ostringstream autotune;
  for (double size : o.autotune_bucket_cap_mb()) autotune << size << " ";
  autotune << "x " << o.autotune_steps() << " steps";
  const auto flag = [](bool on) { return std::string(on ? "true" : "false"); };
  return {{"bucket_cap_mb", cap.str()},
          {"find_unused_parameters", flag(o.find_unused_parameters())},
          {"broadcast_buffers", flag(o.broadcast_buffers())},
          {"sync_batchnorm", flag(o.sync_batchnorm())},
          {"comm_hook", o.comm_hook() ? o.comm_hook()->name() : "none"},
          {"hierarchical_allreduce", flag(o.hierarchical_allreduce())},
          {"gradient_as_bucket_view", flag(o.gradient_as_bucket_view())},
          {"static_graph", flag(o.static_graph())},
          {"autotune_bucket_cap_mb", autotune.str()}};
}


class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<GradientReducer::State> state, std::size_t index) : state_(std::move(state)), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto s = state_.lock()) s->mark_ready(index_);
    return outputs;
  }

 private:
  std::weak_ptr<GradientReducer::State> state_;
  std::size_t index_;
};

// Appends `module`'s parameters that require a gradient (names and tensors, in registration
// order) and its buffers to `s`.
void collect_tensors(const torch::nn::Module& module, GradientReducer::State& s) {
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    s.names.push_back(item.key());
    s.params.push_back(item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) s.buffers.push_back(item.value());
}

// DdpOptions::autotune_bucket_cap_mb's rules (ddp.h).
void check_autotune(const DdpOptions& o) {
  const char* what = "kindling::nn::DistributedDataParallel: autotune_bucket_cap_mb: ";
  if (o.autotune_bucket_cap_mb().empty()) return;
  for (double size : o.autotune_bucket_cap_mb())
    KINDLING_CHECK(size > 0, what, "every size must be positive, got ", size);
  KINDLING_CHECK(o.autotune_steps() >= 2, what, "autotune_steps must be at least 2 (the first step of each size is "
                 "not timed), got ", o.autotune_steps());
  KINDLING_CHECK(!o.comm_hook(), what, "not with a comm_hook ('", o.comm_hook() ? o.comm_hook()->name() : "",
                 "'), which may keep state by bucket; set bucket_cap_mb yourself there");
}

// Checks that every rank holds the same parameters (names, shapes, dtypes), in the same order.
void require_same_parameters(const GradientReducer::State& s, const dist::Group& group) {
  std::ostringstream sig;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    sig << s.names[i] << ':' << s.params[i].sizes() << ':' << s.params[i].scalar_type() << ';';
  }
  const auto all = dist::all_gather(sig.str(), group);
  for (std::size_t r = 0; r < all.size(); ++r) {
    KINDLING_CHECK(all[r] == all[0], "kindling::nn::DistributedDataParallel: rank ", group.ranks()[r],
                   " has other parameters than rank ", group.ranks()[0],
                   " (names, shapes or dtypes differ); every rank "
                   "must build the same model");
  }
}

// Installs on each parameter's gradient accumulator the hook that marks its gradient ready.
void hook_accumulators(const std::shared_ptr<GradientReducer::State>& state) {
  auto& s = *state;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(s.params[i]);
    KINDLING_INTERNAL_ASSERT(acc != nullptr, "parameter ", s.names[i], " has no gradient accumulator");
    acc->add_post_hook(std::make_unique<ReadyHook>(state, i));
    s.accumulators.push_back(std::move(acc));
  }
}

}  // namespace

namespace detail {
// Broadcasts `tensors` from `src` with one collective per (dtype, device) instead of one
// per tensor (ResNet-18 has 60 buffers: per-tensor broadcasts cost ~60 round trips per
// forward). Tensors are written in place.
void broadcast_coalesced(const std::vector<at::Tensor>& tensors, int src, const dist::Group& group) {
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined() || tensors[i].numel() == 0) continue;
    bool placed = false;
    for (auto& g : groups) {
      const auto& first = tensors[g.front()];
      if (first.scalar_type() == tensors[i].scalar_type() && first.device() == tensors[i].device()) {
        g.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) groups.push_back({i});
  }
  for (const auto& g : groups) {
    if (g.size() == 1) {
      dist::broadcast(tensors[g.front()], src, group);
      continue;
    }
    std::vector<at::Tensor> flat;
    flat.reserve(g.size());
    for (std::size_t i : g) flat.push_back(tensors[i].reshape({-1}));
    at::Tensor packed = dist::broadcast(at::cat(flat), src, group);
    int64_t offset = 0;
    for (std::size_t i : g) {
      at::Tensor t = tensors[i];
      t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}
}  // namespace detail

GradientReducer::GradientReducer(const torch::nn::Module& module, DdpOptions options)
    : state_(std::make_shared<State>()) {
  auto& s = *state_;
  s.options = std::move(options);
  const auto& group = s.options.group();
  s.world = group.size();
  s.scale = at::scalar_tensor(1.0 / s.world, at::kDouble);
  s.scale.unsafeGetTensorImpl()->set_wrapped_number(true);
  s.src = group.ranks().front();
  KINDLING_CHECK(s.options.bucket_cap_mb() > 0,
                 "kindling::nn::DistributedDataParallel: bucket_cap_mb must be positive, got ",
                 s.options.bucket_cap_mb());
  check_autotune(s.options);
  s.autotune.done = s.options.autotune_bucket_cap_mb().empty();
  collect_tensors(module, s);
  KINDLING_CHECK(!s.params.empty(),
                 "kindling::nn::DistributedDataParallel: the module has no parameter that requires "
                 "a gradient; there is nothing to synchronise");

  // Else the ranks exchange different buffers and wait on each other until the stall verdict.
  dist::require_same_settings("kindling::nn::DistributedDataParallel", exchanged_settings(s.options), group);
  require_same_parameters(s, group);
  {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> params;
    for (auto& p : s.params) params.push_back(p.detach());
    detail::broadcast_coalesced(params, s.src, group);
    detail::broadcast_coalesced(s.buffers, s.src, group);
  }
  // Across hosts with several ranks on some, the hierarchical all-reduce sends fewer bytes over
  // the host links (DdpOptions::hierarchical_allreduce). Every rank of the world is here.
  if (!s.options.comm_hook() && s.options.hierarchical_allreduce() && s.world > 1 &&
      s.world == dist::get_world_size()) {
    auto hosts = std::make_shared<dist::HostHierarchy>();
    if (hosts->pays()) s.options.comm_hook(hierarchical_allreduce_hook(std::move(hosts)));
  }
  s.make_buckets(detail::reverse_order(s.params.size()));
  s.ready.assign(s.params.size(), 0);
  hook_accumulators(state_);
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::before_forward() {
  auto& s = *state_;
  // As torch's DDP: only a forward that will be followed by a synchronised backward
  // communicates, so evaluation under no-grad (or inside no_sync) stays local.
  if (!at::GradMode::is_enabled() || !sync_enabled()) return;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.forward_start = State::Clock::now();
    s.forward_timed = true;
  }
  if (s.joining) s.notify_join();
  if (!s.options.broadcast_buffers() || s.buffers.empty()) return;
  at::NoGradGuard no_grad;
  detail::broadcast_coalesced(s.buffers, s.src, s.options.group());
}

void GradientReducer::after_forward() noexcept {
  auto& s = *state_;
  if (!at::GradMode::is_enabled() || !sync_enabled()) return;
  std::lock_guard<std::mutex> lock(s.mu);
  s.forward_end = State::Clock::now();
}

double GradientReducer::bucket_cap_mb() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->options.bucket_cap_mb();
}

std::vector<BucketTrial> GradientReducer::bucket_autotune() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->autotune.scores;
}

std::string GradientReducer::comm_hook_name() const {
  return state_->options.comm_hook() ? state_->options.comm_hook()->name() : "none";
}

StepTimes GradientReducer::last_step_times() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->times;
}

void GradientReducer::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->sync = enabled;
}

bool GradientReducer::sync_enabled() const { return state_->sync; }

std::vector<std::vector<std::string>> GradientReducer::buckets() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : state_->buckets) {
    out.emplace_back();
    for (std::size_t i : b.members) out.back().push_back(state_->names[i]);
  }
  return out;
}

int64_t GradientReducer::synchronized_backwards() const { return state_->synchronized; }

double GradientReducer::last_sync_wait_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->last_wait_s;
}

NoSyncGuard::NoSyncGuard(GradientReducer* reducer) : reducer_(reducer) {
  if (reducer_) {
    previous_ = reducer_->sync_enabled();
    reducer_->set_sync(false);
  }
}

NoSyncGuard::~NoSyncGuard() {
  if (reducer_) reducer_->set_sync(previous_);
}

}  // namespace nn

}  // namespace kindling
