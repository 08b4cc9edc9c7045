// DiLoCo (kindling/nn/diloco.h): its options, its construction over a module and an inner
// optimizer, the step that runs the inner one and the exchanges due, and the comm hook of the
// warm-up and of per_host.
#include "kindling/nn/diloco.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <string>
#include <unordered_set>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "diloco_impl.h"
#include "nn/broadcast_coalesced.h"
#include "nn/optimizer_kind.h"

namespace kindling {
namespace nn {

using torch::optim::OptimizerParamGroup;

DiLoCoOptions::DiLoCoOptions() : outer_(std::make_unique<torch::optim::SGDOptions>(
                                     torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(true))) {}
DiLoCoOptions::DiLoCoOptions(const DiLoCoOptions& other) { *this = other; }
DiLoCoOptions& DiLoCoOptions::operator=(const DiLoCoOptions& other) {
  if (this == &other) return *this;
  sync_every_ = other.sync_every_;
  warmup_steps_ = other.warmup_steps_;
  outer_ = other.outer_->clone();
  fragments_ = other.fragments_;
  fragment_sync_delay_ = other.fragment_sync_delay_;
  fragment_update_alpha_ = other.fragment_update_alpha_;
  exchange_dtype_ = other.exchange_dtype_;
  error_feedback_ = other.error_feedback_;
  per_host_ = other.per_host_;
  return *this;
}
DiLoCoOptions::~DiLoCoOptions() = default;

DiLoCoOptions DiLoCoOptions::local_sgd(int64_t every) {
  return DiLoCoOptions().sync_every(every).outer(torch::optim::SGDOptions(1.0));
}

// The setters only store: the constructor checks everything at once, naming the setting.
DiLoCoOptions& DiLoCoOptions::sync_every(int64_t steps) { sync_every_ = steps; return *this; }
DiLoCoOptions& DiLoCoOptions::warmup_steps(int64_t steps) { warmup_steps_ = steps; return *this; }
DiLoCoOptions& DiLoCoOptions::outer(const torch::optim::OptimizerOptions& options) {
  outer_ = options.clone();
  return *this;
}
DiLoCoOptions& DiLoCoOptions::fragments(int64_t count) { fragments_ = count; return *this; }
DiLoCoOptions& DiLoCoOptions::fragment_sync_delay(int64_t steps) { fragment_sync_delay_ = steps; return *this; }
DiLoCoOptions& DiLoCoOptions::fragment_update_alpha(double alpha) { fragment_update_alpha_ = alpha; return *this; }
DiLoCoOptions& DiLoCoOptions::exchange_dtype(c10::ScalarType dtype) { exchange_dtype_ = dtype; return *this; }
DiLoCoOptions& DiLoCoOptions::error_feedback(bool on) { error_feedback_ = on; return *this; }
DiLoCoOptions& DiLoCoOptions::per_host(bool on) { per_host_ = on; return *this; }

namespace {

constexpr const char* kWho = "kindling::nn::DiLoCo: ";

void check_options(const DiLoCoOptions& o) {
  const int64_t h = o.sync_every();
  KINDLING_CHECK(h >= 1, kWho, "sync_every must be at least 1, got ", h);
  KINDLING_CHECK(o.warmup_steps() >= 0, kWho, "warmup_steps must be >= 0, got ", o.warmup_steps());
  KINDLING_CHECK(o.fragments() >= 1 && o.fragments() <= h, kWho, "fragments must be between 1 and sync_every (",
                 h, "), got ", o.fragments());
  KINDLING_CHECK(o.fragment_sync_delay() >= 0 && o.fragment_sync_delay() < h, kWho,
                 "fragment_sync_delay must be between 0 and sync_every - 1 (", h - 1, "), got ",
                 o.fragment_sync_delay(), ": a piece's exchange must end before its next one starts");
  KINDLING_CHECK(o.fragment_update_alpha() >= 0 && o.fragment_update_alpha() <= 1, kWho,
                 "fragment_update_alpha must be between 0 and 1, got ", o.fragment_update_alpha());
  const auto t = o.exchange_dtype();
  KINDLING_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf, kWho,
                 "exchange_dtype must be float32, bfloat16 or float16, got ", c10::toString(t));
  const auto* outer = &o.outer();
  KINDLING_CHECK(dynamic_cast<const torch::optim::SGDOptions*>(outer) || dynamic_cast<const torch::optim::AdamOptions*>(outer) ||
                     dynamic_cast<const torch::optim::AdamWOptions*>(outer),
                 kWho,
                 "the outer optimizer must be torch::optim::SGDOptions, AdamOptions or AdamWOptions");
}

// The module's parameters that `inner` steps, in the module's order; refuses one it does not have.
std::vector<at::Tensor> stepped_parameters(torch::nn::Module& module, const torch::optim::Optimizer& inner) {
  std::unordered_set<const void*> stepped;
  for (const auto& g : inner.param_groups())
    for (const auto& p : g.params()) stepped.insert(p.unsafeGetTensorImpl());
  KINDLING_CHECK(!stepped.empty(), kWho, "the inner optimizer has no parameter; build it over the module's parameters()");
  std::vector<at::Tensor> out;
  for (const auto& p : module.parameters())
    if (stepped.erase(p.unsafeGetTensorImpl()) > 0) out.push_back(p);
  KINDLING_CHECK(stepped.empty(), kWho, stepped.size(), " parameter(s) of the inner optimizer are not the module's; "
                 "build the inner optimizer over the module given to DiLoCo");
  return out;
}

// The parameters cut into `count` runs of about equal numbers of elements, in order: each run
// ends at the parameter boundary nearest to its share, (f + 1) / count of the elements.
std::vector<std::vector<at::Tensor>> cut(const std::vector<at::Tensor>& params, int64_t count) {
  KINDLING_CHECK(static_cast<int64_t>(params.size()) >= count, kWho, "fragments (", count,
                 ") exceeds the parameters stepped (", params.size(), "); ask for at most that many");
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  std::vector<std::vector<at::Tensor>> out(count);
  int64_t seen = 0;  // elements in the runs so far
  std::size_t i = 0;
  for (int64_t f = 0; f < count; ++f) {
    const auto left = static_cast<std::size_t>(count - f - 1);  // runs after this one, a parameter each
    const int64_t share = total * (f + 1);                       // the run's end, times count
    for (;;) {
      seen += params[i].numel();
      out[f].push_back(params[i++]);
      if (params.size() - i <= left) break;  // the runs after this one need the rest
      if (f == count - 1) continue;          // the last run takes everything
      const int64_t next = (seen + params[i].numel()) * count;
      // Take the next parameter while it keeps the end at or below the share, or nearer to it.
      if (next > share && next - share >= share - seen * count) break;
    }
  }
  return out;
}

// The hook: the DDP group's average during the warm-up, then the host's (per_host) or none.
class DiLoCoHook : public CommHook {
 public:
  explicit DiLoCoHook(std::shared_ptr<DiLoCo::Impl> impl) : impl_(std::move(impl)), average_(allreduce_hook()) {}
  std::string name() const override { return "diloco"; }
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override {
    if (!impl_->local()) return average_->run(bucket, group);
    if (impl_->host_group) return average_->run(bucket, *impl_->host_group);
    struct Done : PendingBucket {
      void wait() override {}
    };
    return std::make_unique<Done>();
  }

 private:
  std::shared_ptr<DiLoCo::Impl> impl_;
  std::shared_ptr<CommHook> average_;
};

}  // namespace

DiLoCo::DiLoCo(torch::nn::Module& module, torch::optim::Optimizer& inner, const DiLoCoOptions& options)
    : torch::optim::Optimizer(inner.param_groups(), inner.defaults().clone()), impl_(std::make_shared<Impl>()) {
  check_options(options);
  Impl& s = *impl_;
  s.inner = &inner;
  s.options = options;
  s.rank = dist::get_rank();
  s.world = dist::get_world_size();
  for (const auto& g : inner.param_groups()) s.pushed_lr.push_back(g.options().get_lr());
  const auto pieces = cut(stepped_parameters(module, inner), options.fragments());
  for (const auto& b : module.buffers())
    if (b.is_floating_point()) s.buffers.push_back(b);
  std::vector<at::Tensor> everything = module.parameters();
  for (const auto& b : module.buffers()) everything.push_back(b);
  if (s.world > 1) {
    at::NoGradGuard no_grad;
    detail::broadcast_coalesced(everything, 0, dist::world());
  }
  const int64_t h = options.sync_every();
  for (std::size_t p = 0; p < pieces.size(); ++p) {
    diloco::Fragment f;
    f.params = pieces[p];
    f.offset = ((static_cast<int64_t>(p) + 1) * h / options.fragments()) % h;
    f.carries_buffers = p + 1 == pieces.size() && !s.buffers.empty();
    for (const auto& w : f.params) f.global.push_back(w.detach().clone().requires_grad_(true));
    f.outer = detail::make_optimizer(options.outer(), {OptimizerParamGroup(f.global, options.outer().clone())});
    s.fragments.push_back(std::move(f));
  }
  if (options.per_host() && s.world > 1) {
    s.hosts = std::make_shared<dist::HostHierarchy>();
    for (const auto& ranks : s.hosts->host_ranks()) {  // every rank makes every host's group
      dist::Group g = dist::new_group(ranks);
      for (int r : ranks)
        if (r == s.rank && ranks.size() > 1) s.host_group = g;
    }
  }
}

DiLoCo::~DiLoCo() = default;

std::shared_ptr<CommHook> DiLoCo::comm_hook() { return std::make_shared<DiLoCoHook>(impl_); }

at::Tensor DiLoCo::step(LossClosure closure) {
  Impl& s = *impl_;
  auto& groups = s.inner->param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double seen = groups[g].options().get_lr();
    KINDLING_CHECK(seen == s.pushed_lr[g], kWho, "the inner optimizer's learning rate of group ", g,
                   " was changed behind DiLoCo (", s.pushed_lr[g], " given, ", seen,
                   " found); schedule the DiLoCo optimizer, whose param_groups() it passes on");
    groups[g].set_options(param_groups()[g].options().clone());
    s.pushed_lr[g] = groups[g].options().get_lr();
  }
  at::Tensor loss = s.inner->step(std::move(closure));
  ++s.steps;
  s.synchronize();
  return loss;
}

void DiLoCo::synchronize() {
  for (auto& f : impl_->fragments) {
    if (f.pending) impl_->finish(f);
    impl_->start(f);
    impl_->finish(f);
  }
}

int64_t DiLoCo::steps() const { return impl_->steps; }
int64_t DiLoCo::synchronizations() const { return impl_->syncs; }

void DiLoCo::save(torch::serialize::OutputArchive&) const {
  KINDLING_CHECK(false, kWho, "LibTorch's archives cannot hold its state; save state_dict() "
                 "(kindling::handlers::stateful(optimizer) does)");
}
void DiLoCo::load(torch::serialize::InputArchive&) {
  KINDLING_CHECK(false, kWho, "LibTorch's archives cannot hold its state; load a state_dict() with load_state_dict()");
}

}  // namespace nn
}  // namespace kindling
