// create_supervised_tbptt_trainer: ignite's truncated backpropagation through time, chunk by
// chunk along the time dimension, with its two events.
#include "kindling/engine/tbptt.h"

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <string>

#include "kindling/error.h"
#include "metrics/shape_text.h"

namespace kindling {
namespace engine {
namespace {

const char* const kTbpttWho = "kindling::engine::create_supervised_tbptt_trainer";

// The batch's x and y cut into chunks of `step` along `dim`, after checking they can be.
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> chunks(const data::Example& batch, int64_t step,
                                                                   int64_t dim) {
  const at::Tensor& x = batch.data;
  const at::Tensor& y = batch.target;
  KINDLING_CHECK(x.defined() && y.defined(), kTbpttWho, ": the batch needs data (x) and a target (y)");
  KINDLING_CHECK(dim < x.dim() && dim < y.dim() && dim >= -std::min(x.dim(), y.dim()), kTbpttWho, ": time dimension ",
                 dim, " is not a dimension of x ", metrics::shape_text(x), " and y ", metrics::shape_text(y),
                 "; set TbpttTrainerOptions().dim(...) to the time axis");
  KINDLING_CHECK(x.size(dim) == y.size(dim), kTbpttWho, ": x ", metrics::shape_text(x), " and y ",
                 metrics::shape_text(y), " have different lengths along the time dimension ", dim, " (", x.size(dim),
                 " vs ", y.size(dim), "); each time step needs its target");
  KINDLING_CHECK(x.size(dim) >= 1, kTbpttWho, ": x ", metrics::shape_text(x), " has no time step along dimension ", dim,
                 "; give sequences of at least one step");
  return {x.split(step, dim), y.split(step, dim)};
}

}  // namespace

const Event TbpttEvents::TIME_ITERATION_STARTED = Event::custom("TIME_ITERATION_STARTED");
const Event TbpttEvents::TIME_ITERATION_COMPLETED = Event::custom("TIME_ITERATION_COMPLETED");

Engine create_supervised_tbptt_trainer(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                       LossFunction loss_fn, int64_t tbtt_step, TbpttForward forward,
                                       TbpttTrainerOptions options) {
  KINDLING_CHECK(tbtt_step >= 1, kTbpttWho, ": tbtt_step must be at least 1, got ", tbtt_step,
                 "; pass the number of time steps between two optimizer steps");
  KINDLING_CHECK(static_cast<bool>(forward), kTbpttWho, ": forward is empty; pass (x_t, hidden) -> (y_pred_t, hidden)");
  KINDLING_CHECK(static_cast<bool>(loss_fn), kTbpttWho, ": loss_fn is empty");
  Engine engine([&model, &optimizer, loss_fn = std::move(loss_fn), forward = std::move(forward), tbtt_step,
                 o = std::move(options)](Engine& e, const data::Example& batch) -> Value {
    auto [xs, ys] = chunks(batch, tbtt_step, o.dim());
    std::vector<at::Tensor> hidden;
    double total = 0;
    for (std::size_t t = 0; t < xs.size(); ++t) {
      const data::Example chunk{xs[t], ys[t]};
      auto xy = o.prepare_batch() ? o.prepare_batch()(chunk, o.device(), o.non_blocking())
                                  : prepare_batch(chunk, o.device(), o.non_blocking());
      e.fire_event(TbpttEvents::TIME_ITERATION_STARTED);
      model.train(true);
      optimizer.zero_grad();
      for (auto& h : hidden) h = h.detach();  // backpropagate through this chunk only
      auto [y_pred, next] = forward(xy.first, hidden);
      hidden = std::move(next);
      const at::Tensor loss = loss_fn(y_pred, xy.second);
      loss.backward();
      optimizer.step();
      const double value = loss.item<double>();
      e.state().output = value;
      total += value;
      e.fire_event(TbpttEvents::TIME_ITERATION_COMPLETED);
    }
    return total / static_cast<double>(xs.size());
  });
  engine.register_events({TbpttEvents::TIME_ITERATION_STARTED, TbpttEvents::TIME_ITERATION_COMPLETED});
  return engine;
}

}  // namespace engine
}  // namespace kindling
