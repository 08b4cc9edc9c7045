#pragma once
/// \file
/// ignite's create_supervised_tbptt_trainer and Tbptt_Events: a trainer for recurrent models on
/// long sequences by truncated backpropagation through time. Each batch's sequence (x, y) is cut
/// along the time dimension into chunks of `tbtt_step` steps (the last may be shorter); for each
/// chunk the optimizer steps once, backpropagating through that chunk only, and the hidden state
/// is carried to the next chunk detached from the graph.
///
/// \code
///   struct Net : torch::nn::Module {                       // a GRU, then a linear head
///     torch::nn::GRU gru{register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(3, 16)))};
///     torch::nn::Linear head{register_module("head", torch::nn::Linear(16, 2))};
///   };
///   auto net = std::make_shared<Net>();
///   // One chunk's forward: (x_t, hidden) -> (y_pred_t, new hidden); hidden is empty for the
///   // first chunk of a sequence.
///   auto forward = [&](const at::Tensor& x, const std::vector<at::Tensor>& hidden) {
///     auto [out, h] = hidden.empty() ? net->gru->forward(x) : net->gru->forward(x, hidden[0]);
///     return std::make_pair(net->head->forward(out), std::vector<at::Tensor>{h});
///   };
///   Engine trainer = create_supervised_tbptt_trainer(*net, optimizer, mse, 20, forward);
///   trainer.on(TbpttEvents::TIME_ITERATION_COMPLETED.every(10), log_chunk_loss);
/// \endcode
///
/// Ranks: as create_supervised_trainer, the engine communicates only through the model and the
/// metrics; with a kindling DDP, call its forward in `forward`: each chunk's backward
/// all-reduces the gradients.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/engine/events.h"
#include "kindling/engine/supervised.h"
#include "kindling/export.h"
#include "kindling/options.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace kindling {
namespace engine {

/// ignite's Tbptt_Events: fired by the trainer around each chunk (their counter: how many
/// times the engine fired them, so `.every(n)` counts chunks).
struct KINDLING_API TbpttEvents {
  /// Before a chunk's forward.
  static const Event TIME_ITERATION_STARTED;
  /// After a chunk's optimizer step; State::output holds the chunk's loss (a number).
  static const Event TIME_ITERATION_COMPLETED;
};

/// One chunk's forward: (x_t, hidden) -> (y_pred_t, hidden for the next chunk). `hidden` is
/// empty for a sequence's first chunk, then the tensors this returned, detached.
using TbpttForward = std::function<std::pair<at::Tensor, std::vector<at::Tensor>>(
    const at::Tensor& x_t, const std::vector<at::Tensor>& hidden)>;

/// Options of create_supervised_tbptt_trainer (chain the setters); ignite's arguments.
struct KINDLING_API TbpttTrainerOptions {
  /// The time dimension of x and y (default 0, as LibTorch's recurrent modules without
  /// batch_first).
  KINDLING_ARG(int64_t, dim) = 0;
  /// Where each chunk goes (unset: where it is).
  KINDLING_ARG(std::optional<c10::Device>, device);
  /// Asynchronous host-to-device copies (default false).
  KINDLING_ARG(bool, non_blocking) = false;
  /// Turns a chunk {x_t, y_t} into (x, y) on the device (default: prepare_batch).
  KINDLING_ARG(PrepareBatch, prepare_batch);
};

/// An Engine whose iteration runs truncated backpropagation through time over the batch
/// (data = x, target = y, cut along options.dim() into chunks of `tbtt_step`): for each chunk,
/// fires TIME_ITERATION_STARTED, puts `model` in train mode, zero_grad, (y_pred_t, hidden) =
/// forward(x_t, hidden detached), loss = loss_fn(y_pred_t, y_t), backward, optimizer step,
/// State::output = the loss, fires TIME_ITERATION_COMPLETED; the iteration returns the mean
/// of the chunks' losses (a number). `model` (for its train mode) and `optimizer` are used by
/// reference: they must outlive the engine. Throws kindling::UsageError for tbtt_step < 1, an
/// empty forward or loss_fn; at an iteration, for x and y of different lengths along the time
/// dimension, or a dimension they lack (naming the shapes). Every rank calls it.
KINDLING_API Engine create_supervised_tbptt_trainer(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                                                    LossFunction loss_fn, int64_t tbtt_step, TbpttForward forward,
                                                    TbpttTrainerOptions options = TbpttTrainerOptions());

}  // namespace engine
}  // namespace kindling
