// One clock for the ranks (kindling/dist/clock.h): NTP's offset from round trips that rank 0
// starts, the round with the shortest trip kept.
#include "kindling/dist/clock.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/timeline.h"

namespace kindling {
namespace dist {
namespace {

constexpr int kTag = 7341;  // the messages of this exchange, apart from a user's point-to-point ones

at::Tensor on_device(const std::vector<int64_t>& values) {
  return at::tensor(values, at::TensorOptions().dtype(at::kLong)).to(device());
}

// Rank 0's side with `peer`: {peer's clock minus rank 0's, half the shortest round trip}.
std::vector<int64_t> measure_peer(int peer, int rounds) {
  int64_t best_delay = std::numeric_limits<int64_t>::max(), best_offset = 0;
  at::Tensor reply = on_device({0, 0});
  for (int r = 0; r < rounds; ++r) {
    const int64_t t1 = timeline::now_ns();
    send(on_device({t1}), peer, kTag);
    recv(reply, peer, kTag);
    const at::Tensor times = reply.cpu();
    const int64_t t4 = timeline::now_ns();
    const int64_t t2 = times[0].item<int64_t>(), t3 = times[1].item<int64_t>();
    const int64_t delay = (t4 - t1) - (t3 - t2);
    if (delay < best_delay) {
      best_delay = delay;
      best_offset = ((t2 - t1) + (t3 - t4)) / 2;
    }
  }
  return {best_offset, best_delay / 2};
}

// Another rank's side: answer each of rank 0's messages with when it came and when the answer leaves.
void answer(int rounds) {
  at::Tensor ping = on_device({0});
  for (int r = 0; r < rounds; ++r) {
    recv(ping, 0, kTag);
    (void)ping.cpu();  // the message is here (a device's receive completes on its stream)
    const int64_t t2 = timeline::now_ns();
    send(on_device({t2, timeline::now_ns()}), 0, kTag);
  }
}

}  // namespace

ClockOffset measure_clock_offset(int rounds) {
  KINDLING_CHECK(rounds >= 1, "kindling::dist::measure_clock_offset: rounds=", rounds,
                 "; give at least 1 round trip per rank (8 by default)");
  const int world = get_world_size(), rank = get_rank();
  if (world <= 1) return ClockOffset();
  std::vector<int64_t> all(2 * static_cast<std::size_t>(world), 0);  // per rank: offset, uncertainty
  if (rank == 0) {
    for (int peer = 1; peer < world; ++peer) {
      const auto found = measure_peer(peer, rounds);
      all[2 * static_cast<std::size_t>(peer)] = found[0];
      all[2 * static_cast<std::size_t>(peer) + 1] = found[1];
    }
  } else {
    answer(rounds);
  }
  const at::Tensor shared = broadcast(on_device(all), 0).cpu();
  ClockOffset out;
  out.offset_ns = -shared[2 * rank].item<int64_t>();  // the peer's clock minus rank 0's, turned round
  out.uncertainty_ns = shared[2 * rank + 1].item<int64_t>();
  return out;
}

}  // namespace dist
}  // namespace kindling
