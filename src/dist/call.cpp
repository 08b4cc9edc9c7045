// How one call of the API reaches the engine (call.h).
#include "dist/call.h"

#include <ATen/ATen.h>

#include <string>

namespace kindling {
namespace dist {
namespace detail {
namespace {

bool looks_like_timeout(const std::string& msg) {
  return msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
}

}  // namespace

using ::kindling::detail::rank_prefix;

[[noreturn]] void translate(const std::exception& e, const GroupState& g, const char* name, int64_t seq) {
  auto& rt = runtime();
  const std::string engine_msg = engine_message(e);
  const std::string where = rank_prefix() + "kindling::dist::" + name + " on the " + g.label() + " (collective #" +
                            std::to_string(seq) + " of this rank on it)";
  if (looks_like_timeout(engine_msg)) {
    std::string diagnosis = rt.monitor ? rt.monitor->diagnose(g, seq, name) : std::string("no progress information");
    throw TimeoutError(where + " timed out after " + std::to_string(g.timeout.count()) + " ms; " + diagnosis +
                       ". Every rank of the group must call the same collectives in the same order: look for a rank "
                       "that skips this call or calls another one, or raise InitOptions::timeout if a rank is only "
                       "slow. The " +
                       rt.backend_name + " engine said: " + engine_msg);
  }
  throw CommunicationError(where + " failed in the " + rt.backend_name + " engine: " + engine_msg +
                           " A peer process has probably exited or crashed: look at the other ranks' output for the "
                           "first error.");
}

std::chrono::milliseconds wait_timeout(const GroupState& g, bool p2p) {
  // Collectives carry the timeout into the engine, whose own message is more precise;
  // the wait gets some slack so that the engine normally reports first.
  if (p2p) return g.timeout;
  return g.timeout + std::min<std::chrono::milliseconds>(g.timeout, std::chrono::seconds(5));
}

int64_t enter(GroupState& g, const char* name) {
  const int64_t seq = g.seq.fetch_add(1, std::memory_order_relaxed) + 1;
  g.op.store(name, std::memory_order_relaxed);
  return seq;
}

// The group's state when this rank takes part in a collective on it; null in the serial
// model or when this rank is not a member (idist then returns the input unchanged).
std::shared_ptr<GroupState> participant(const Group& group, const char* name) {
  auto g = resolve(group, name);
  if (g == nullptr || g->group_rank < 0 || g->comm == nullptr) return nullptr;
  return g;
}

Staged stage(const at::Tensor& t, const char* name, const char* what) {
  KINDLING_CHECK(t.defined(), "kindling::dist::", name, ": the ", what,
                 " is undefined (a default-constructed at::Tensor); pass a tensor with data");
  const auto dev = device();
  at::Tensor w = t;
  if (w.device() != dev) w = w.to(dev);
  if (!w.is_contiguous()) w = w.contiguous();
  return {w, !w.is_same(t)};
}

int member_index(const GroupState& g, int global, const char* name, const char* role) {
  const int idx = g.index_of(global);
  KINDLING_CHECK(
      idx >= 0, "kindling::dist::", name, ": ", role, " rank ", global, " is not a member of the ", g.label(),
      " (its ranks are ",
      [&] {
        std::string s;
        for (int r : g.ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
        return s;
      }(),
      "); ranks are global ranks");
  return idx;
}

void check_bitwise(ReduceOp op, at::ScalarType dtype, const char* name) {
  if (op != ReduceOp::kAnd && op != ReduceOp::kOr) return;
  KINDLING_CHECK(at::isIntegralType(dtype, /*includeBool=*/true), "kindling::dist::", name, ": ", to_string(op),
                 " is a bitwise reduction and needs an integral or bool tensor, got ", c10::toString(dtype),
                 "; use MIN (logical and of 0/1 values) or MAX (logical or) for floating-point data");
}

void check_in_place_tensor(const at::Tensor& t, const char* name) {
  KINDLING_CHECK(
      t.defined() && t.is_contiguous() && t.device() == device(), "kindling::dist::", name,
      ": the tensor must be defined, contiguous and on ", device().str(), " (got ",
      t.defined() ? t.device().str() + (t.is_contiguous() ? "" : ", non-contiguous") : std::string("undefined"),
      "); call .contiguous() / .to(kindling::dist::device()) first");
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
