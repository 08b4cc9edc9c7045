// p2p: blocking and non-blocking point-to-point.
#include <torch/torch.h>

#include <kindling/kindling.h>

#include "tutorial.h"

namespace kd = kindling::dist;

namespace dist_tutorial {

namespace {

void report_data(int rank, const torch::Tensor& tensor, float expected) {
  const float value = tensor[0].item<float>();
  say("Rank ", rank, " has data ", value);
  KINDLING_CHECK_T(kindling::Error, value == expected, "dist_tutorial p2p: rank ", rank, " holds ", value,
                   " after the transfer instead of ", expected);
}

}  // namespace

void run_p2p() {
  const int rank = kd::get_rank();
  const auto on_device = torch::TensorOptions().device(kd::device());

  // send() and recv() return once the message is handed over or has arrived. Rank 1 must
  // own a tensor of the right size to receive into. Ranks above 1 sit this one out.
  section("p2p: blocking send / recv");
  if (rank <= 1) {
    torch::Tensor tensor = torch::zeros({1}, on_device);
    if (rank == 0) {
      tensor.add_(1);
      kd::send(tensor, /*dst=*/1);
    } else {
      kd::recv(tensor, /*src=*/0);
    }
    report_data(rank, tensor, 1.0f);
  }

  // isend() / irecv() return at once with a Work handle. Until wait() returns, rank 0 must
  // not write its tensor and rank 1 must not read its own.
  section("p2p: non-blocking isend / irecv");
  if (rank <= 1) {
    torch::Tensor tensor = torch::zeros({1}, on_device);
    kd::Work request;
    if (rank == 0) {
      tensor.add_(1);
      request = kd::isend(tensor, /*dst=*/1);
      say("Rank 0 started sending");
    } else {
      request = kd::irecv(tensor, /*src=*/0);
      say("Rank 1 started receiving");
    }
    request.wait();
    report_data(rank, tensor, 1.0f);
  }
}

}  // namespace dist_tutorial
