// EMAHandler: the EMA model's copy (clone() or a factory), ignite's momentum warm-up, and the
// update (parameters averaged, buffers copied).
#include "kindling/handlers/ema_handler.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kindling/engine/keep_alive.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

namespace {

constexpr const char* kEmaWho = "kindling::handlers::EMAHandler";

void check_ema_options(const EMAHandlerOptions& o) {
  KINDLING_CHECK(o.momentum() > 0 && o.momentum() < 1, kEmaWho, ": invalid momentum ", o.momentum(),
                 ", expected a value in (0, 1) (ignite's default is 0.0002)");
  KINDLING_CHECK(o.momentum_warmup().has_value() == o.warmup_iters().has_value(), kEmaWho,
                 ": momentum_warmup and warmup_iters go together (the warm-up needs both), but only ",
                 o.momentum_warmup() ? "momentum_warmup" : "warmup_iters", " is set; set both or neither");
  if (!o.momentum_warmup()) return;
  const double warmup = *o.momentum_warmup();
  KINDLING_CHECK(warmup > 0 && warmup < 1, kEmaWho, ": invalid momentum_warmup ", warmup,
                 ", expected a value in (0, 1)");
  KINDLING_CHECK(warmup <= o.momentum(), kEmaWho, ": momentum_warmup should be less than or equal to momentum, but ",
                 "momentum_warmup is ", warmup, " and momentum ", o.momentum());
  KINDLING_CHECK(*o.warmup_iters() >= 1, kEmaWho, ": invalid warmup_iters ", *o.warmup_iters(),
                 ", expected an iteration count >= 1");
}

std::string ema_describe(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << t.scalar_type() << " on " << t.device();
  return out.str();
}

// Throws unless `copy` has the tensors of `model` (names, shapes, dtypes, devices, in order).
// `what` is "parameter" or "buffer"; `remedy` says what to do.
void check_ema_layout(const torch::OrderedDict<std::string, at::Tensor>& model,
                      const torch::OrderedDict<std::string, at::Tensor>& copy, const char* what,
                      const std::string& remedy) {
  KINDLING_CHECK(model.size() == copy.size(), kEmaWho, ": the model has ", model.size(), " ", what,
                 "s but the EMA model ", copy.size(), "; ", remedy);
  for (std::size_t i = 0; i < model.size(); ++i) {
    const auto& m = model[i];
    const auto& c = copy[i];
    const bool same = m.key() == c.key() && m.value().sizes() == c.value().sizes() &&
                      m.value().scalar_type() == c.value().scalar_type() && m.value().device() == c.value().device();
    KINDLING_CHECK(same, kEmaWho, ": ", what, " ", i, " of the model is '", m.key(), "' (", ema_describe(m.value()),
                   ") but the EMA model's is '", c.key(), "' (", ema_describe(c.value()), "); ", remedy);
  }
}

// Copies the values of `from` into `to` (checked alike by check_ema_layout).
void ema_copy_values(const torch::OrderedDict<std::string, at::Tensor>& from,
                     const torch::OrderedDict<std::string, at::Tensor>& to) {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < from.size(); ++i) to[i].value().copy_(from[i].value());
}

// The EMA model: a deep copy of `model`, from make_copy or clone(), detached and in eval mode.
std::shared_ptr<torch::nn::Module> make_ema_copy(const std::shared_ptr<torch::nn::Module>& model,
                                                 const EMAHandler::ModuleFactory& make_copy) {
  std::shared_ptr<torch::nn::Module> copy;
  if (make_copy) {
    copy = make_copy();
    KINDLING_CHECK(copy != nullptr, kEmaWho, ": the factory returned a null module; return a new module of the ",
                   "model's architecture");
    KINDLING_CHECK(copy != model, kEmaWho, ": the factory returned the model itself; return a new module of the ",
                   "same architecture (the handler copies the model's weights into it)");
    const std::string remedy =
        "the factory should build a module of the model's architecture and move it to the model's device and dtype";
    check_ema_layout(model->named_parameters(true), copy->named_parameters(true), "parameter", remedy);
    check_ema_layout(model->named_buffers(true), copy->named_buffers(true), "buffer", remedy);
    ema_copy_values(model->named_parameters(true), copy->named_parameters(true));
    ema_copy_values(model->named_buffers(true), copy->named_buffers(true));
  } else {
    try {
      copy = model->clone();
    } catch (const c10::Error&) {
      KINDLING_CHECK(false, kEmaWho, ": cannot copy the model, a ", model->name(),
                     ", because it is not Cloneable (clone() is not implemented for it). Either derive it from ",
                     "torch::nn::Cloneable<", model->name(), "> with a reset() that registers its parameters, ",
                     "buffers and submodules, or pass a factory as the third argument: EMAHandler(model, options, "
                     "[] { return std::make_shared<",
                     model->name(), ">(...); }) that builds a module of the same ",
                     "architecture (its weights are overwritten with the model's)");
    }
  }
  for (auto& p : copy->parameters(true)) p.requires_grad_(false);
  copy->eval();
  return copy;
}

}  // namespace

EMAHandler::EMAHandler(std::shared_ptr<torch::nn::Module> model, const EMAHandlerOptions& options,
                       ModuleFactory make_copy)
    : model_(std::move(model)), options_(options) {
  KINDLING_CHECK(model_ != nullptr, kEmaWho, ": the model is null; pass the module to average");
  check_ema_options(options_);
  ema_model_ = make_ema_copy(model_, make_copy);
}

engine::HandlerHandle EMAHandler::attach(engine::Engine& engine, const std::string& name,
                                         const engine::EventsList& event) {
  std::shared_ptr<EMAHandler> self = engine::keep_alive(*this, kEmaWho);
  engine::ValueMap& attributes = engine.state().attributes;
  if (attributes.count(name) != 0) {
    // Current ignite's rule: a warning, not an error, so that attach works after a resume
    // whose restored state holds the attribute. The value is kept until the first event.
    log(LogLevel::kWarning, std::string(kEmaWho) + ".attach: the attribute '" + name + "' is already in " +
                                engine.name + ".state().attributes (holding " + attributes.at(name).to_string() +
                                "); it is kept and set at each event from now on. Expected when the trainer's state "
                                "was restored with it; if another EMA handler writes it, attach this one under "
                                "another name, e.g. \"" +
                                name + "_2\", or the attribute shows whichever ran last");
  } else {
    attributes[name] = 0.0;
  }
  return engine.add_event_handler(event, [self, name](engine::Engine& e) {
    const double momentum = self->momentum_at(e.state().iteration);
    e.state().attributes[name] = momentum;
    self->update(momentum);
  });
}

double EMAHandler::momentum_at(int64_t iteration) const {
  KINDLING_CHECK(iteration >= 1, kEmaWho, "::momentum_at: the iteration should be at least 1 (the engine's iteration ",
                 "counts from 1), got ", iteration, "; attach the handler to an event during the run");
  if (!options_.momentum_warmup()) return options_.momentum();
  const double start = *options_.momentum_warmup(), end = options_.momentum();
  const double span = static_cast<double>(std::max<int64_t>(1, *options_.warmup_iters() - 1));
  return std::min(end, start + (end - start) * static_cast<double>(iteration - 1) / span);
}

void EMAHandler::update(double momentum) {
  const auto params = model_->named_parameters(true), ema_params = ema_model_->named_parameters(true);
  const auto buffers = model_->named_buffers(true), ema_buffers = ema_model_->named_buffers(true);
  const std::string remedy =
      "did the model change (moved to another device or dtype) after the EMAHandler was built? Build the handler "
      "after moving the model, or move ema_model() the same way";
  check_ema_layout(params, ema_params, "parameter", remedy);
  check_ema_layout(buffers, ema_buffers, "buffer", remedy);
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    ema_params[i].value().mul_(1.0 - momentum).add_(params[i].value().detach(), momentum);
  }
  ema_copy_values(buffers, ema_buffers);
}

}  // namespace handlers
}  // namespace kindling
