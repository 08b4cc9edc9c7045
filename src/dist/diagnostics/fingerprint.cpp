// Collective fingerprints (see fingerprint.h).
#include "dist/diagnostics/fingerprint.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "common/env.h"
#include "dist/runtime_state.h"
#include "kindling/error.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

std::string key(int group_id, int64_t seq, int member) {
  return "kindling/fp/" + std::to_string(group_id) + "/" + std::to_string(seq) + "/" + std::to_string(member);
}

std::string describe(const char* op, const at::Tensor* t, bool same_shape) {
  std::ostringstream out;
  out << op;
  if (t != nullptr && t->defined()) {
    out << " " << c10::toString(t->scalar_type());
    if (same_shape) out << " " << t->sizes();
  }
  return out.str();
}

}  // namespace

bool fingerprints_enabled() {
  static const bool on = [] {
    for (const char* name : {"KINDLING_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG"}) {
      if (::kindling::detail::get_env(name).value_or("") == "DETAIL") return true;
    }
    return false;
  }();
  return on;
}

void check_fingerprint(const GroupState& g, int64_t seq, const char* op, const at::Tensor* tensor, bool same_shape) {
  auto& rt = runtime();
  auto store = rt.backend ? rt.backend->store() : c10::intrusive_ptr<c10d::Store>();
  if (!store || g.ranks.size() < 2) return;
  const std::string mine = describe(op, tensor, same_shape);
  std::vector<std::string> calls(g.ranks.size());
  try {
    store->set(key(g.id, seq, g.group_rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    for (std::size_t m = 0; m < g.ranks.size(); ++m) {
      if (static_cast<int>(m) == g.group_rank) {
        calls[m] = mine;
        continue;
      }
      const std::string k = key(g.id, seq, static_cast<int>(m));
      store->wait({k}, g.timeout);
      auto raw = store->get(k);
      calls[m].assign(raw.begin(), raw.end());
    }
    if (seq > 2) store->deleteKey(key(g.id, seq - 2, g.group_rank));
  } catch (const std::exception& e) {
    throw TimeoutError(::kindling::detail::rank_prefix() + "kindling::dist::" + op + " on the " + g.label() +
                       " (collective #" + std::to_string(seq) + "): the fingerprints of the other ranks did not "
                       "arrive (" + engine_message(e) + "); a rank skipped this collective or stalled");
  }
  bool same = true;
  for (const auto& c : calls) same = same && c == mine;
  if (same) return;
  std::ostringstream list;
  for (std::size_t m = 0; m < calls.size(); ++m) list << (m ? "; " : "") << "rank " << g.ranks[m] << ": " << calls[m];
  throw UsageError(::kindling::detail::rank_prefix() + "kindling::dist: collective #" + std::to_string(seq) +
                   " on the " + g.label() + " differs between the ranks (" + list.str() +
                   "). Every rank must call the same collectives in the same order with tensors of the same dtype "
                   "and shape (fingerprints are checked because KINDLING_DISTRIBUTED_DEBUG=DETAIL)");
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
