// kindling's DistributedDataParallel: bucketed gradient all-reduce overlapped with
// backward (see include/kindling/nn/ddp.h).
#include "kindling/nn/ddp.h"
#include "kindling/nn/batchnorm.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <mutex>
#include <sstream>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/dist/hierarchy.h"
#include "kindling/dist/same_settings.h"
#include "kindling/error.h"
#include "nn/broadcast_coalesced.h"
#include "nn/ddp/ddp_buckets.h"
#include "nn/ddp/ddp_state.h"

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
// order) and its buffers.
void collect_tensors(const torch::nn::Module& module, std::vector<std::string>& names,
                     std::vector<at::Tensor>& params, std::vector<at::Tensor>& buffers) {
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names.push_back(item.key());
    params.push_back(item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) buffers.push_back(item.value());
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
void require_same_parameters(const std::vector<std::string>& names, const std::vector<at::Tensor>& params,
                             const dist::Group& group) {
  std::ostringstream sig;
  for (std::size_t i = 0; i < params.size(); ++i) {
    sig << names[i] << ':' << params[i].sizes() << ':' << params[i].scalar_type() << ';';
  }
  const auto all = dist::all_gather(sig.str(), group);
  for (std::size_t r = 0; r < all.size(); ++r) {
    KINDLING_CHECK(all[r] == all[0], "kindling::nn::DistributedDataParallel: rank ", group.ranks()[r],
                   " has other parameters than rank ", group.ranks()[0],
                   " (names, shapes or dtypes differ); every rank "
                   "must build the same model");
  }
}

}  // namespace


GradientReducer::State::State(const torch::nn::Module& module, DdpOptions options)
    : options_(std::move(options)), autotune_(options_.autotune_bucket_cap_mb(), options_.autotune_steps()) {
  const auto& group = options_.group();
  world_ = group.size();
  scale_ = at::scalar_tensor(1.0 / world_, at::kDouble);
  scale_.unsafeGetTensorImpl()->set_wrapped_number(true);
  src_ = group.ranks().front();
  KINDLING_CHECK(options_.bucket_cap_mb() > 0,
                 "kindling::nn::DistributedDataParallel: bucket_cap_mb must be positive, got ",
                 options_.bucket_cap_mb());
  check_autotune(options_);
  collect_tensors(module, names_, params_, buffers_);
  KINDLING_CHECK(!params_.empty(),
                 "kindling::nn::DistributedDataParallel: the module has no parameter that requires "
                 "a gradient; there is nothing to synchronise");

  // Else the ranks exchange different buffers and wait on each other until the stall verdict.
  dist::require_same_settings("kindling::nn::DistributedDataParallel", exchanged_settings(options_), group);
  require_same_parameters(names_, params_, group);
  {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> detached;
    for (auto& p : params_) detached.push_back(p.detach());
    detail::broadcast_coalesced(detached, src_, group);
    detail::broadcast_coalesced(buffers_, src_, group);
  }
  // Across hosts with several ranks on some, the hierarchical all-reduce sends fewer bytes over
  // the host links (DdpOptions::hierarchical_allreduce). Every rank of the world is here.
  if (!options_.comm_hook() && options_.hierarchical_allreduce() && world_ > 1 && world_ == dist::get_world_size()) {
    auto hosts = std::make_shared<dist::HostHierarchy>();
    if (hosts->pays()) options_.comm_hook(hierarchical_allreduce_hook(std::move(hosts)));
  }
  buckets_.make(detail::reverse_order(params_.size()), options_.bucket_cap_mb(), options_.gradient_as_bucket_view(),
                options_.group());
}

void GradientReducer::State::hook_accumulators() {
  KINDLING_INTERNAL_ASSERT(accumulators_.empty(), "the accumulators' hooks are installed once");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    KINDLING_INTERNAL_ASSERT(acc != nullptr, "parameter ", names_[i], " has no gradient accumulator");
    acc->add_post_hook(std::make_unique<ReadyHook>(shared_from_this(), i));
    accumulators_.push_back(std::move(acc));
  }
}

void GradientReducer::State::before_forward() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    timer_.forward_started();
  }
  if (join_.joining()) notify_join();
  if (!options_.broadcast_buffers() || buffers_.empty()) return;
  at::NoGradGuard no_grad;
  detail::broadcast_coalesced(buffers_, src_, options_.group());
}

void GradientReducer::State::after_forward() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  timer_.forward_ended();
}

double GradientReducer::State::bucket_cap_mb() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_.bucket_cap_mb();
}

std::vector<BucketTrial> GradientReducer::State::bucket_autotune() const {
  std::lock_guard<std::mutex> lock(mu_);
  return autotune_.scores();
}

std::string GradientReducer::State::comm_hook_name() const {
  return options_.comm_hook() ? options_.comm_hook()->name() : "none";
}

StepTimes GradientReducer::State::last_step_times() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timer_.last();
}

double GradientReducer::State::last_sync_wait_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timer_.last_wait_seconds();
}

std::vector<std::vector<std::string>> GradientReducer::State::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    out.emplace_back();
    for (std::size_t i : buckets_.members(b)) out.back().push_back(names_[i]);
  }
  return out;
}

void GradientReducer::State::set_sync(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  sync_ = enabled;
}

GradientReducer::GradientReducer(const torch::nn::Module& module, DdpOptions options)
    : state_(std::make_shared<State>(module, std::move(options))) {
  state_->hook_accumulators();
}

GradientReducer::~GradientReducer() = default;

void GradientReducer::before_forward() {
  // As torch's DDP: only a forward that will be followed by a synchronised backward
  // communicates, so evaluation under no-grad (or inside no_sync) stays local.
  if (!at::GradMode::is_enabled() || !sync_enabled()) return;
  state_->before_forward();
}

void GradientReducer::after_forward() noexcept {
  if (!at::GradMode::is_enabled() || !sync_enabled()) return;
  state_->after_forward();
}

double GradientReducer::bucket_cap_mb() const { return state_->bucket_cap_mb(); }

std::vector<BucketTrial> GradientReducer::bucket_autotune() const { return state_->bucket_autotune(); }

std::string GradientReducer::comm_hook_name() const { return state_->comm_hook_name(); }

StepTimes GradientReducer::last_step_times() const { return state_->last_step_times(); }

void GradientReducer::set_sync(bool enabled) { state_->set_sync(enabled); }

bool GradientReducer::sync_enabled() const { return state_->sync(); }

std::vector<std::vector<std::string>> GradientReducer::buckets() const { return state_->bucket_names(); }

int64_t GradientReducer::synchronized_backwards() const { return state_->synchronized_backwards(); }

double GradientReducer::last_sync_wait_seconds() const { return state_->last_sync_wait_seconds(); }

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
