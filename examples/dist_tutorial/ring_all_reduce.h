#pragma once
/// \file
/// Two all-reduce (sum) implementations built only from kindling::dist point-to-point
/// calls, as in the "Our Own Ring-Allreduce" part of PyTorch's distributed tutorial.
/// Both must be called by every rank of the world, with tensors of the same shape and
/// dtype on kindling::dist::device(); both return a new tensor and leave the input as is.

#include <ATen/ATen.h>

#include <kindling/kindling.h>

#include <cstdint>
#include <utility>

namespace dist_tutorial {

/// The tutorial's ring: every tensor travels once around the ring, whole.
///
/// In each of the size - 1 steps a rank sends the tensor it holds to its right neighbour
/// and receives its left neighbour's one, which it adds to its running sum and forwards
/// in the next step. After size - 1 steps every rank has seen every rank's tensor. Each
/// step moves the full tensor, so the total traffic per rank is (size - 1) * bytes.
inline at::Tensor ring_all_reduce(const at::Tensor& input) {
  namespace kd = kindling::dist;
  const int rank = kd::get_rank();
  const int size = kd::get_world_size();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;

  at::Tensor outgoing = input.clone(at::MemoryFormat::Contiguous);
  at::Tensor incoming = at::empty_like(outgoing);
  at::Tensor sum = outgoing.clone();
  for (int step = 0; step + 1 < size; ++step) {
    // `outgoing` must stay untouched until the send completes; the receive goes into the
    // other buffer, so both can be in flight together.
    kd::Work send = kd::isend(outgoing, right);
    kd::recv(incoming, left);
    sum.add_(incoming);
    send.wait();
    std::swap(outgoing, incoming);  // forward what was just received
  }
  return sum;
}

/// The exercise the tutorial leaves open: the chunked ring of Baidu's DeepSpeech (and of
/// gloo and NCCL), which moves only 2 * (size - 1) / size of the tensor per rank.
///
/// The flattened tensor is cut into `size` chunks; chunk c is [c * n / size,
/// (c + 1) * n / size), so sizes differ by at most one element and may be empty.
///  1. Reduce-scatter, size - 1 steps: at step k rank r sends chunk (r - k) to its right
///     neighbour and adds the chunk (r - k - 1) coming from its left one into its own
///     copy. The chunk sent at step k is the one completed at step k - 1, so after the
///     last step rank r holds the full sum of chunk (r + 1).
///  2. All-gather, size - 1 steps: at step k rank r sends chunk (r + 1 - k), which is
///     complete, and receives the complete chunk (r - k) straight into its result.
/// A chunk index is the same on both ends of every transfer, so a rank skips an empty
/// chunk exactly when its neighbour does (no zero-byte messages are sent).
inline at::Tensor chunked_ring_all_reduce(const at::Tensor& input) {
  namespace kd = kindling::dist;
  const int rank = kd::get_rank();
  const int size = kd::get_world_size();
  const int right = (rank + 1) % size;
  const int left = (rank - 1 + size) % size;

  at::Tensor result = input.clone(at::MemoryFormat::Contiguous).reshape({-1});
  const int64_t n = result.numel();
  auto wrap = [size](int c) { return ((c % size) + size) % size; };
  // A view of chunk c of `result`: contiguous, so it can be sent or received in place.
  auto chunk = [&](int c) {
    const int64_t begin = n * c / size;
    const int64_t end = n * (c + 1) / size;
    return result.narrow(0, begin, end - begin);
  };
  at::Tensor scratch = at::empty({(n + size - 1) / size}, result.options());

  // Sends chunk `out` to the right while receiving chunk `in` from the left; with
  // `accumulate` the incoming data is added to chunk `in`, else it replaces it.
  auto exchange = [&](int out, int in, bool accumulate) {
    at::Tensor out_chunk = chunk(out);
    at::Tensor in_chunk = chunk(in);
    kd::Work send;
    if (out_chunk.numel() > 0) send = kd::isend(out_chunk, right);
    if (in_chunk.numel() > 0) {
      if (accumulate) {
        at::Tensor buffer = scratch.narrow(0, 0, in_chunk.numel());
        kd::recv(buffer, left);
        in_chunk.add_(buffer);
      } else {
        kd::recv(in_chunk, left);
      }
    }
    if (send.valid()) send.wait();
  };

  for (int step = 0; step + 1 < size; ++step) exchange(wrap(rank - step), wrap(rank - step - 1), true);
  for (int step = 0; step + 1 < size; ++step) exchange(wrap(rank + 1 - step), wrap(rank - step), false);
  return result.view(input.sizes());
}

}  // namespace dist_tutorial
