// Point-to-point messages: send / recv (blocking) and isend / irecv (a Work to wait on).
#include <ATen/ATen.h>

#include "dist/collectives/call.h"

namespace kindling {
namespace dist {

using detail::member_index;
using detail::run;
using detail::stage;

namespace {

std::shared_ptr<detail::GroupState> p2p_group(const Group& group, const char* name, int peer, bool any_ok) {
  auto g = detail::resolve(group, name);
  KINDLING_CHECK(g != nullptr, "kindling::dist::", name,
                 ": point-to-point needs a distributed backend; call initialize() with world size > 1");
  KINDLING_CHECK(g->group_rank >= 0, "kindling::dist::", name, ": this rank is not a member of the ", g->label());
  if (!(any_ok && peer == -1)) {
    member_index(*g, peer, name, "peer");
    KINDLING_CHECK(peer != detail::runtime().rank, "kindling::dist::", name, ": rank ", peer,
                   " cannot exchange a message with itself; use another peer rank");
  }
  return g;
}

Work start_p2p(const at::Tensor& tensor, int peer, int tag, const Group& group, bool is_send) {
  const char* name = is_send ? "isend" : "irecv";
  auto g = p2p_group(group, name, peer, !is_send);
  detail::check_in_place_tensor(tensor, name);
  const int peer_index = peer < 0 ? -1 : g->index_of(peer);
  at::Tensor t = tensor;
  return Work(detail::start_async(g, name, /*collective=*/false, [&](detail::Communicator& c) {
    return is_send ? c.send(t, peer_index, tag) : c.recv(t, peer_index, tag);
  }));
}

}  // namespace

Work isend(const at::Tensor& tensor, int dst, int tag, const Group& group) {
  return start_p2p(tensor, dst, tag, group, true);
}
Work irecv(const at::Tensor& tensor, int src, int tag, const Group& group) {
  return start_p2p(tensor, src, tag, group, false);
}
void send(const at::Tensor& tensor, int dst, int tag, const Group& group) {
  auto g = p2p_group(group, "send", dst, false);
  auto s = stage(tensor, "send");
  const int peer = g->index_of(dst);
  run(
      *g, "send", [&](detail::Communicator& c) { return c.send(s.work, peer, tag); }, true);
}
int recv(const at::Tensor& tensor, int src, int tag, const Group& group) {
  auto g = p2p_group(group, "recv", src, true);
  auto s = stage(tensor, "recv");
  const int peer = src < 0 ? -1 : g->index_of(src);
  int from = src;
  const int64_t seq = detail::enter(*g, "recv", /*collective=*/false);
  try {
    auto op = g->comm->recv(s.work, peer, tag);
    detail::wait_op(*op, *g, "recv", seq, /*p2p=*/true);
    if (src < 0) from = g->global_rank(op->source_rank());
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    detail::translate(e, *g, "recv", seq);
  }
  if (s.copy_back) tensor.copy_(s.work);
  return from;
}

}  // namespace dist
}  // namespace kindling
