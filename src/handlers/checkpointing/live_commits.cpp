// Live recovery's commits, whole and sharded (src/handlers/checkpointing/live_commits.h).
#include "handlers/checkpointing/live_commits.h"

#include <torch/serialize.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "handlers/checkpointing/deep_copy.h"

namespace kindling {
namespace handlers {
namespace detail {

namespace {

constexpr char kWho[] = "kindling::handlers::LiveRecovery";

// The kept objects split into those held whole and the sharded models (each once, with its optimizer).
struct Kept {
  Objects whole;
  std::vector<ShardedPart> sharded;
};

Kept split(const Objects& objects) {
  Kept kept;
  for (const auto& item : objects) {
    const ShardedPart part = item.second->sharded_part();
    if (part.model == nullptr) {
      kept.whole.push_back(item);
      continue;
    }
    auto it = std::find_if(kept.sharded.begin(), kept.sharded.end(),
                           [&](const ShardedPart& p) { return p.model == part.model; });
    if (it == kept.sharded.end()) it = kept.sharded.insert(kept.sharded.end(), ShardedPart{part.model, nullptr});
    KINDLING_CHECK(part.optimizer == nullptr || it->optimizer == nullptr || it->optimizer == part.optimizer, kWho,
                   ": '", item.first, "' is a second optimizer of one sharded model; keep the one optimizer the "
                   "model trains with");
    if (part.optimizer) it->optimizer = part.optimizer;
  }
  return kept;
}

at::Tensor to_bytes(const c10::IValue& value) {
  const std::vector<char> bytes = torch::pickle_save(value);
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

c10::IValue from_bytes(const at::Tensor& t) {
  const auto* p = static_cast<const char*>(t.data_ptr());
  return torch::pickle_load(std::vector<char>(p, p + t.numel()));
}

// Sends `own` to global rank `to` and returns what `from` sent (sizes first).
c10::IValue exchange(const c10::IValue& own, int to, int from) {
  const at::Tensor out = to_bytes(own);
  const at::Tensor size_out = at::full({1}, out.numel(), at::kLong), size_in = at::empty({1}, at::kLong);
  dist::Work sent = dist::isend(size_out, to);
  dist::recv(size_in, from);
  sent.wait();
  const at::Tensor in = at::empty({size_in.item<int64_t>()}, at::kByte);
  sent = dist::isend(out, to);
  dist::recv(in, from);
  sent.wait();
  return from_bytes(in);
}

// How far a rank's buddy is: the same local rank on the next node where there are several, else
// the next rank (rank r sends to r + step and receives from r - step, modulo the world).
int buddy_step(int world) {
  const int local = std::max(1, dist::get_nproc_per_node());
  return world > local && world % local == 0 ? local : 1;
}

StateDict whole_states(const Objects& whole) {
  StateDict all = new_state_dict();
  for (const auto& [name, object] : whole) all.insert(name, object->state_dict());
  return ::kindling::detail::deep_copy(c10::IValue(all)).toGenericDict();
}

c10::IValue own_parts(const std::vector<ShardedPart>& sharded, int64_t world) {
  StateDict parts = new_state_dict();
  for (std::size_t m = 0; m < sharded.size(); ++m) {
    const StateDict local = sharded[m].model->local_state_dict(sharded[m].optimizer);
    KINDLING_CHECK(local.at("world").toInt() == world, kWho, ": a sharded model over a group of ",
                   local.at("world").toInt(), " ranks in a world of ", world, " is not kept by live recovery; shard "
                   "it over the whole world (the default group)");
    parts.insert(std::to_string(m), ::kindling::detail::deep_copy(c10::IValue(local)));
  }
  return c10::IValue(parts);
}

// What a rank says of a commit it holds: iteration, rank and world it was made in, its buddy's
// rank, and how many sharded models' parts it has.
constexpr int64_t kFields = 5;
struct Held {
  int64_t iteration = -1, rank = -1, world = 0, buddy_rank = -1, models = 0;
};

void describe(const Commit& c, std::vector<int64_t>& out) {
  const int64_t models = c.own.isGenericDict() ? static_cast<int64_t>(c.own.toGenericDict().size()) : 0;
  out.insert(out.end(), {c.iteration, c.rank, c.world, c.buddy_rank, models});
}

// Every rank's commit of the newest iteration any rank holds (its last one, or the one it set
// aside when another rank got past the agreement); iteration -1 where it has none of it.
std::vector<Held> newest_held(const Commit& committed, const Commit& staged) {
  std::vector<int64_t> mine;
  describe(committed, mine);
  describe(staged, mine);
  const int world = dist::get_world_size();
  const at::Tensor t = at::tensor(mine, at::kLong);
  const at::Tensor all = (world > 1 ? dist::all_gather(t) : t).view({world, 2 * kFields}).contiguous();
  const int64_t* v = all.data_ptr<int64_t>();
  int64_t newest = -1;
  for (int r = 0; r < world; ++r) newest = std::max(newest, v[r * 2 * kFields]);
  std::vector<Held> held(world);
  for (int r = 0; r < world; ++r)
    for (int64_t which = 0; which < 2; ++which) {
      const int64_t* f = v + r * 2 * kFields + which * kFields;
      if (newest >= 0 && f[0] == newest && held[r].iteration < 0) held[r] = {f[0], f[1], f[2], f[3], f[4]};
    }
  return held;
}

// For each rank of the commit's world, the lowest rank of this world holding its part (its own,
// else its buddy's copy). Throws kindling::UsageError, the same on every rank, for a part lost
// with its copy.
std::vector<int> holders(const std::vector<Held>& held, int64_t models, int64_t newest) {
  int64_t saved_world = 0;
  for (const Held& h : held)
    if (h.iteration >= 0) saved_world = std::max(saved_world, h.world);
  for (const Held& h : held)
    KINDLING_CHECK(h.iteration < 0 || (h.world == saved_world && h.models == models), kWho, ": the ranks' commits of "
                   "iteration ", h.iteration, " differ (", h.world, " vs ", saved_world, " ranks, ", h.models, " vs ",
                   models, " sharded models); keep the same objects in every world");
  std::vector<int> from(static_cast<std::size_t>(saved_world), -1);
  for (int pass = 0; pass < 2; ++pass)
    for (int r = 0; r < static_cast<int>(held.size()); ++r) {
      const int64_t k = pass == 0 ? held[r].rank : held[r].buddy_rank;
      if (held[r].iteration >= 0 && k >= 0 && k < saved_world && from[k] < 0) from[k] = r;
    }
  for (int64_t k = 0; k < saved_world; ++k)
    KINDLING_CHECK(from[k] >= 0, kWho, ": rank ", k, " of the last commit's world (", saved_world, " ranks, iteration ",
                   newest, ") was lost together with the rank "
                   "that kept the copy of its part of the sharded model; the job cannot go on from memory: resume it "
                   "from a checkpoint (kindling::handlers::save_sharded keeps every rank's part on disk)");
  return from;
}

// `value` (a dict) sent by global rank `src` to every rank.
StateDict sent_from(int src, const std::function<c10::IValue()>& value) {
  std::optional<at::Tensor> bytes;
  if (dist::get_rank() == src) bytes = to_bytes(value());
  const at::Tensor t = dist::get_world_size() > 1 ? dist::broadcast(bytes, src) : *bytes;
  const c10::IValue got = from_bytes(t);
  KINDLING_CHECK(got.isGenericDict(), kWho, ": the committed state is not a dict (", got.tagKind(), ")");
  return got.toGenericDict();
}

}  // namespace

void LiveCommits::commit(const Objects& objects, int64_t iteration) {
  const Kept kept = split(objects);
  Commit next;
  next.iteration = iteration;
  next.whole = whole_states(kept.whole);
  if (kept.sharded.empty()) {
    committed_ = std::move(next);
    return;
  }
  const int world = dist::get_world_size(), rank = dist::get_rank();
  next.rank = rank;
  next.world = world;
  next.own = own_parts(kept.sharded, world);
  if (world > 1) {
    const int step = buddy_step(world);
    next.buddy_rank = (rank - step + world) % world;
    next.buddy = exchange(next.own, (rank + step) % world, static_cast<int>(next.buddy_rank));
  }
  staged_ = std::move(next);
  // Every rank holds its buddy's part: only then does the new commit replace the last one.
  if (world > 1) dist::all_reduce(at::ones({1}, at::kInt));
  committed_ = std::move(staged_);
  staged_ = Commit();
}

void LiveCommits::restore(const Objects& objects) {
  const Kept kept = split(objects);
  const std::vector<Held> held = newest_held(committed_, staged_);
  const auto first = std::find_if(held.begin(), held.end(), [](const Held& h) { return h.iteration >= 0; });
  if (first == held.end()) {  // the job's first world
    staged_ = Commit();
    return;
  }
  const int64_t newest = first->iteration;
  if (committed_.iteration != newest) committed_ = staged_.iteration == newest ? std::move(staged_) : Commit();
  staged_ = Commit();
  const std::vector<int> from = holders(held, static_cast<int64_t>(kept.sharded.size()), newest);
  const StateDict whole = sent_from(static_cast<int>(first - held.begin()), [&] { return c10::IValue(committed_.whole); });
  if (!kept.whole.empty()) Checkpoint::load_objects(kept.whole, whole);
  for (std::size_t m = 0; m < kept.sharded.size(); ++m) {
    const auto part = [&](int k) {
      const int src = from.at(k);
      return sent_from(src, [&] {
        const c10::IValue& parts = held[src].rank == k ? committed_.own : committed_.buddy;
        return parts.toGenericDict().at(std::to_string(m));
      });
    };
    kept.sharded[m].model->load_local_state_dicts(part, static_cast<int64_t>(from.size()), kept.sharded[m].optimizer);
  }
  if (committed_.iteration != newest) {  // a joiner (or a rank that missed the last commit): the whole part
    committed_ = Commit();
    committed_.iteration = newest;
  }
  committed_.whole = whole;  // unpickled: shares nothing with the objects
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
