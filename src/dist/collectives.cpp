// Collectives of kindling::dist on top of the backend-neutral Communicator interface:
// argument checks, device/contiguity handling, progress counting and error translation.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <iostream>

#include "dist/runtime.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

using ::kindling::detail::rank_prefix;

bool looks_like_timeout(const std::string& msg) {
  return msg.find("imed out") != std::string::npos || msg.find("imeout") != std::string::npos;
}

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
                       "slow. The " + rt.backend_name + " engine said: " + engine_msg);
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

template <typename Start>
void run(GroupState& g, const char* name, Start&& start, bool p2p = false) {
  const int64_t seq = enter(g, name);
  try {
    OpPtr op = start(*g.comm);
    op->wait(wait_timeout(g, p2p));
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    translate(e, g, name, seq);
  }
}

// The group's state when this rank takes part in a collective on it; null in the serial
// model or when this rank is not a member (idist then returns the input unchanged).
std::shared_ptr<GroupState> participant(const Group& group, const char* name) {
  auto g = resolve(group, name);
  if (g == nullptr || g->group_rank < 0 || g->comm == nullptr) return nullptr;
  return g;
}

// A tensor the engine can work on: defined, contiguous, on device(). `copy_back` tells
// whether the result must be copied into the caller's tensor afterwards.
struct Staged {
  at::Tensor work;
  bool copy_back = false;
};

Staged stage(const at::Tensor& t, const char* name, const char* what = "tensor") {
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
  KINDLING_CHECK(idx >= 0, "kindling::dist::", name, ": ", role, " rank ", global, " is not a member of the ", g.label(),
                 " (its ranks are ", [&] {
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

std::vector<int64_t> to_vec(at::IntArrayRef a) { return std::vector<int64_t>(a.begin(), a.end()); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

bool is_serial_or_nonmember(const Group& group) { return participant(group, "collective") == nullptr; }

int group_member_global_rank(const Group& group, int index) {
  auto g = resolve(group, "collective");
  if (g == nullptr) return index;
  return g->global_rank(index);
}

}  // namespace detail

using detail::member_index;
using detail::participant;
using detail::run;
using detail::stage;

ReduceOp reduce_op_from_string(const std::string& name) {
  if (name == "SUM") return ReduceOp::kSum;
  if (name == "PRODUCT") return ReduceOp::kProduct;
  if (name == "MIN") return ReduceOp::kMin;
  if (name == "MAX") return ReduceOp::kMax;
  if (name == "AND") return ReduceOp::kAnd;
  if (name == "OR") return ReduceOp::kOr;
  KINDLING_CHECK(false, "kindling::dist: unsupported reduction operation: '", name,
                 "'; use one of SUM, PRODUCT, MIN, MAX, AND, OR");
  return ReduceOp::kSum;
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kProduct: return "PRODUCT";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kAnd: return "AND";
    case ReduceOp::kOr: return "OR";
  }
  return "?";
}

at::Tensor all_reduce(const at::Tensor& tensor, ReduceOp op, const Group& group) {
  auto g = participant(group, "all_reduce");
  KINDLING_CHECK(tensor.defined(), "kindling::dist::all_reduce: the tensor is undefined; pass a tensor with data");
  detail::check_bitwise(op, tensor.scalar_type(), "all_reduce");
  if (!g) return tensor;
  auto s = stage(tensor, "all_reduce");
  if (s.work.scalar_type() == at::kBool) {  // engines reduce bytes, not bools
    s.work = s.work.to(at::kByte);
    s.copy_back = true;
  }
  run(*g, "all_reduce", [&](detail::Communicator& c) { return c.all_reduce(s.work, op); });
  if (s.copy_back) tensor.copy_(s.work);
  return tensor;
}

at::Tensor all_gather(const at::Tensor& tensor, const Group& group) {
  auto g = participant(group, "all_gather");
  KINDLING_CHECK(tensor.defined(), "kindling::dist::all_gather: the tensor is undefined; pass a tensor with data");
  if (!g) return tensor;
  auto s = stage(tensor, "all_gather");
  const int64_t n = static_cast<int64_t>(g->ranks.size());
  std::vector<int64_t> shape{n};
  for (auto d : s.work.sizes()) shape.push_back(d);
  at::Tensor out = at::empty(shape, s.work.options());
  std::vector<at::Tensor> outs;
  outs.reserve(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) outs.push_back(out.select(0, i));
  run(*g, "all_gather", [&](detail::Communicator& c) { return c.all_gather(outs, s.work); });
  if (tensor.dim() > 0) out = out.flatten(0, 1);
  return s.copy_back ? out.to(tensor.device()) : out;
}

std::vector<at::Tensor> all_gather_tensors_with_shapes(const at::Tensor& tensor,
                                                       const std::vector<std::vector<int64_t>>& shapes,
                                                       const Group& group) {
  auto g = participant(group, "all_gather_tensors_with_shapes");
  KINDLING_CHECK(tensor.defined(), "kindling::dist::all_gather_tensors_with_shapes: the tensor is undefined");
  if (!g) return {tensor};
  KINDLING_CHECK(shapes.size() == g->ranks.size(), "kindling::dist::all_gather_tensors_with_shapes: got ",
                 shapes.size(), " shapes for a group of ", g->ranks.size(), " ranks; give one shape per member");
  const auto mine = detail::to_vec(tensor.sizes());
  KINDLING_CHECK(shapes[static_cast<std::size_t>(g->group_rank)] == mine,
                 "kindling::dist::all_gather_tensors_with_shapes: this rank's tensor has shape ", detail::shape_str(mine),
                 " but shapes[", g->group_rank, "] says ", detail::shape_str(shapes[static_cast<std::size_t>(g->group_rank)]));
  std::vector<int64_t> max_shape = mine;
  for (const auto& s : shapes) {
    KINDLING_CHECK(s.size() == mine.size(), "kindling::dist::all_gather_tensors_with_shapes: every shape needs ",
                   mine.size(), " dimensions, got ", detail::shape_str(s), "; use all_gather_tensors for mixed ranks");
    for (std::size_t d = 0; d < s.size(); ++d) max_shape[d] = std::max(max_shape[d], s[d]);
  }
  at::Tensor padded = at::zeros(max_shape, tensor.options().device(device()));
  at::Tensor view = padded;
  for (std::size_t d = 0; d < mine.size(); ++d) view = view.narrow(static_cast<int64_t>(d), 0, mine[d]);
  view.copy_(tensor);
  at::Tensor all = all_gather(padded.dim() == 0 ? padded : padded.unsqueeze(0), group);
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    at::Tensor t = all.select(0, static_cast<int64_t>(i));
    for (std::size_t d = 0; d < shapes[i].size(); ++d) t = t.narrow(static_cast<int64_t>(d), 0, shapes[i][d]);
    out.push_back(t.to(tensor.device()));
  }
  return out;
}

std::vector<at::Tensor> all_gather_tensors(const at::Tensor& tensor, const Group& group) {
  auto g = participant(group, "all_gather_tensors");
  KINDLING_CHECK(tensor.defined(), "kindling::dist::all_gather_tensors: the tensor is undefined");
  if (!g) return {tensor};
  using Header = std::pair<std::vector<int64_t>, int>;
  auto headers = all_gather_object(Header{detail::to_vec(tensor.sizes()), static_cast<int>(tensor.scalar_type())}, group);
  int64_t max_numel = 0;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    KINDLING_CHECK(headers[i].second == static_cast<int>(tensor.scalar_type()),
                   "kindling::dist::all_gather_tensors: rank ", g->global_rank(static_cast<int>(i)), " passed a ",
                   c10::toString(static_cast<at::ScalarType>(headers[i].second)), " tensor but this rank passed ",
                   c10::toString(tensor.scalar_type()), "; every rank must use the same dtype");
    int64_t numel = 1;
    for (auto d : headers[i].first) numel *= d;
    max_numel = std::max(max_numel, numel);
  }
  at::Tensor flat = at::zeros({max_numel}, tensor.options().device(device()));
  flat.narrow(0, 0, tensor.numel()).copy_(tensor.reshape({-1}));
  at::Tensor all = all_gather(flat.unsqueeze(0), group);
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < headers.size(); ++i) {
    int64_t numel = 1;
    for (auto d : headers[i].first) numel *= d;
    out.push_back(all.select(0, static_cast<int64_t>(i)).narrow(0, 0, numel).view(headers[i].first).to(tensor.device()));
  }
  return out;
}

at::Tensor broadcast(const at::Tensor& tensor, int src, const Group& group) {
  auto g = participant(group, "broadcast");
  KINDLING_CHECK(tensor.defined(), "kindling::dist::broadcast: the tensor is undefined on this rank; pass a tensor of "
                                   "the source's shape and dtype, or use safe mode (std::optional, std::nullopt)");
  if (!g) return tensor;
  const int root = member_index(*g, src, "broadcast", "source");
  auto s = stage(tensor, "broadcast");
  run(*g, "broadcast", [&](detail::Communicator& c) { return c.broadcast(s.work, root); });
  if (s.copy_back) tensor.copy_(s.work);
  return tensor;
}

at::Tensor broadcast(const std::optional<at::Tensor>& tensor, int src, const Group& group) {
  const bool is_src = get_rank() == src;
  KINDLING_CHECK(!is_src || (tensor && tensor->defined()), "kindling::dist::broadcast: the source rank ", src,
                 " passed no tensor; the source must pass the data to broadcast");
  auto g = participant(group, "broadcast");
  if (!g) return tensor.value_or(at::Tensor());
  member_index(*g, src, "broadcast", "source");
  using Header = std::pair<std::vector<int64_t>, int>;
  Header h;
  if (is_src) h = Header{detail::to_vec(tensor->sizes()), static_cast<int>(tensor->scalar_type())};
  h = broadcast_object(h, src, group);
  at::Tensor target = is_src ? *tensor
                             : at::empty(h.first, at::TensorOptions().dtype(static_cast<at::ScalarType>(h.second)).device(device()));
  return broadcast(target, src, group);
}

at::Tensor reduce(const at::Tensor& tensor, int dst, ReduceOp op, const Group& group) {
  auto g = participant(group, "reduce");
  KINDLING_CHECK(tensor.defined(), "kindling::dist::reduce: the tensor is undefined; pass a tensor with data");
  detail::check_bitwise(op, tensor.scalar_type(), "reduce");
  if (!g) return tensor;
  const int root = member_index(*g, dst, "reduce", "destination");
  auto s = stage(tensor, "reduce");
  if (s.work.scalar_type() == at::kBool) {
    s.work = s.work.to(at::kByte);
    s.copy_back = true;
  }
  run(*g, "reduce", [&](detail::Communicator& c) { return c.reduce(s.work, root, op); });
  if (s.copy_back) tensor.copy_(s.work);
  return tensor;
}

at::Tensor scatter(const at::Tensor& output, const std::vector<at::Tensor>& chunks, int src, const Group& group) {
  auto g = participant(group, "scatter");
  KINDLING_CHECK(output.defined(), "kindling::dist::scatter: the output tensor is undefined; pass a tensor of the "
                                   "chunks' shape and dtype");
  const bool is_src = get_rank() == src;
  if (!g) {
    if (is_src && chunks.size() == 1) output.copy_(chunks[0]);
    return output;
  }
  const int root = member_index(*g, src, "scatter", "source");
  std::vector<at::Tensor> ins;
  if (is_src) {
    KINDLING_CHECK(chunks.size() == g->ranks.size(), "kindling::dist::scatter: the source passed ", chunks.size(),
                   " chunks for a group of ", g->ranks.size(), " ranks; pass one chunk per member");
    for (const auto& c : chunks) {
      KINDLING_CHECK(c.defined() && c.sizes() == output.sizes() && c.scalar_type() == output.scalar_type(),
                     "kindling::dist::scatter: every chunk must have the output's shape ",
                     detail::shape_str(detail::to_vec(output.sizes())), " and dtype ", c10::toString(output.scalar_type()),
                     ", got ", c.defined() ? detail::shape_str(detail::to_vec(c.sizes())) : std::string("undefined"));
      ins.push_back(stage(c, "scatter", "chunk").work);
    }
  } else {
    KINDLING_CHECK(chunks.empty(), "kindling::dist::scatter: only the source rank ", src,
                   " passes chunks; this rank passed ", chunks.size());
  }
  auto s = stage(output, "scatter", "output tensor");
  run(*g, "scatter", [&](detail::Communicator& c) { return c.scatter(s.work, ins, root); });
  if (s.copy_back) output.copy_(s.work);
  return output;
}

std::vector<at::Tensor> gather(const at::Tensor& tensor, int dst, const Group& group) {
  auto g = participant(group, "gather");
  KINDLING_CHECK(tensor.defined(), "kindling::dist::gather: the tensor is undefined; pass a tensor with data");
  if (!g) return get_rank() == dst ? std::vector<at::Tensor>{tensor} : std::vector<at::Tensor>{};
  const int root = member_index(*g, dst, "gather", "destination");
  auto s = stage(tensor, "gather");
  std::vector<at::Tensor> outs;
  if (g->group_rank == root) {
    for (std::size_t i = 0; i < g->ranks.size(); ++i) outs.push_back(at::empty_like(s.work));
  }
  run(*g, "gather", [&](detail::Communicator& c) { return c.gather(outs, s.work, root); });
  if (s.copy_back)
    for (auto& o : outs) o = o.to(tensor.device());
  return outs;
}

std::vector<at::Tensor> all_to_all(const std::vector<at::Tensor>& inputs, const Group& group) {
  auto g = participant(group, "all_to_all");
  if (!g) return inputs;
  const std::size_t n = g->ranks.size();
  KINDLING_CHECK(inputs.size() == n, "kindling::dist::all_to_all: got ", inputs.size(), " input tensors for a group of ",
                 n, " ranks; pass one tensor per member (inputs[i] goes to the i-th member)");
  std::vector<std::vector<int64_t>> my_shapes;
  for (std::size_t i = 0; i < n; ++i) {
    KINDLING_CHECK(inputs[i].defined() && inputs[i].scalar_type() == inputs[0].scalar_type(),
                   "kindling::dist::all_to_all: input ", i, " is undefined or has another dtype than input 0");
    my_shapes.push_back(detail::to_vec(inputs[i].sizes()));
  }
  using Header = std::pair<std::vector<std::vector<int64_t>>, int>;
  auto all = all_gather_object(Header{my_shapes, static_cast<int>(inputs[0].scalar_type())}, group);
  std::vector<int64_t> in_splits, out_splits;
  std::vector<at::Tensor> flat_in;
  for (std::size_t i = 0; i < n; ++i) {
    in_splits.push_back(inputs[i].numel());
    flat_in.push_back(inputs[i].to(device()).reshape({-1}));
  }
  for (std::size_t j = 0; j < n; ++j) {
    KINDLING_CHECK(all[j].second == static_cast<int>(inputs[0].scalar_type()), "kindling::dist::all_to_all: rank ",
                   g->global_rank(static_cast<int>(j)), " sends another dtype than this rank; use one dtype everywhere");
    int64_t numel = 1;
    for (auto d : all[j].first[static_cast<std::size_t>(g->group_rank)]) numel *= d;
    out_splits.push_back(numel);
  }
  at::Tensor in = at::cat(flat_in);
  int64_t total = 0;
  for (auto v : out_splits) total += v;
  at::Tensor out = at::empty({total}, in.options());
  run(*g, "all_to_all", [&](detail::Communicator& c) { return c.all_to_all(out, in, out_splits, in_splits); });
  std::vector<at::Tensor> result;
  int64_t offset = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const auto& shape = all[j].first[static_cast<std::size_t>(g->group_rank)];
    result.push_back(out.narrow(0, offset, out_splits[j]).view(shape).to(inputs[0].device()));
    offset += out_splits[j];
  }
  return result;
}

void barrier(const Group& group) {
  auto g = participant(group, "barrier");
  if (!g) return;
  run(*g, "barrier", [&](detail::Communicator& c) { return c.barrier(); });
}

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

void check_p2p_tensor(const at::Tensor& t, const char* name) {
  KINDLING_CHECK(t.defined() && t.is_contiguous() && t.device() == device(), "kindling::dist::", name,
                 ": the tensor must be defined, contiguous and on ", device().str(), " (got ",
                 t.defined() ? t.device().str() + (t.is_contiguous() ? "" : ", non-contiguous") : std::string("undefined"),
                 "); call .contiguous() / .to(kindling::dist::device()) first");
}

Work start_p2p(const at::Tensor& tensor, int peer, int tag, const Group& group, bool is_send) {
  const char* name = is_send ? "isend" : "irecv";
  auto g = p2p_group(group, name, peer, !is_send);
  check_p2p_tensor(tensor, name);
  const int peer_index = peer < 0 ? -1 : g->index_of(peer);
  const int64_t seq = detail::enter(*g, name);
  auto state = std::make_shared<detail::WorkState>();
  state->group = g;
  state->name = name;
  state->seq = seq;
  at::Tensor t = tensor;
  try {
    state->op = is_send ? g->comm->send(t, peer_index, tag) : g->comm->recv(t, peer_index, tag);
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    detail::translate(e, *g, name, seq);
  }
  return Work(state);
}

}  // namespace

namespace detail {
namespace {
// An operation that is complete from the start (serial model, non-members).
class DoneOp : public PendingOp {
 public:
  void wait(std::chrono::milliseconds) override {}
  bool is_completed() override { return true; }
};
}  // namespace
}  // namespace detail

at::Tensor detail::Communicator::empty_buffer(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty(sizes, options);
}

at::Tensor empty_comm_buffer(at::IntArrayRef sizes, const at::TensorOptions& options, const Group& group) {
  auto g = participant(group, "empty_comm_buffer");
  const auto opts = options.device_opt().has_value() ? options : options.device(device());
  if (!g || opts.device() != device()) return at::empty(sizes, opts);
  return g->comm->empty_buffer(sizes, opts);
}

Work all_reduce_async(const at::Tensor& tensor, ReduceOp op, const Group& group) {
  const char* name = "all_reduce_async";
  KINDLING_CHECK(tensor.defined(), "kindling::dist::all_reduce_async: the tensor is undefined; pass a tensor with data");
  detail::check_bitwise(op, tensor.scalar_type(), name);
  auto state = std::make_shared<detail::WorkState>();
  state->name = name;
  auto g = participant(group, name);
  if (!g) {
    state->op = std::make_unique<detail::DoneOp>();
    return Work(state);
  }
  check_p2p_tensor(tensor, name);
  KINDLING_CHECK(tensor.scalar_type() != at::kBool, "kindling::dist::all_reduce_async: bool tensors are not supported; "
                 "reduce a uint8 tensor (or use the blocking all_reduce)");
  const int64_t seq = detail::enter(*g, name);
  state->group = g;
  state->seq = seq;
  state->collective = true;
  at::Tensor t = tensor;
  try {
    state->op = g->comm->all_reduce(t, op);
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    detail::translate(e, *g, name, seq);
  }
  return Work(state);
}

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
  run(*g, "send", [&](detail::Communicator& c) { return c.send(s.work, peer, tag); }, true);
}
int recv(const at::Tensor& tensor, int src, int tag, const Group& group) {
  auto g = p2p_group(group, "recv", src, true);
  auto s = stage(tensor, "recv");
  const int peer = src < 0 ? -1 : g->index_of(src);
  int from = src;
  const int64_t seq = detail::enter(*g, "recv");
  try {
    auto op = g->comm->recv(s.work, peer, tag);
    op->wait(detail::wait_timeout(*g, true));
    if (src < 0) from = g->global_rank(op->source_rank());
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    detail::translate(e, *g, "recv", seq);
  }
  if (s.copy_back) tensor.copy_(s.work);
  return from;
}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    try {
      if (state_ && !state_->waited) wait();
    } catch (const std::exception& e) {
      log(LogLevel::kError, e.what());
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Work::~Work() {
  if (state_ && !state_->waited) {
    try {
      wait();
    } catch (const std::exception& e) {
      log(LogLevel::kError, std::string("kindling::dist::Work destroyed without wait(); its operation failed: ") + e.what());
    }
  }
}

void Work::wait() {
  KINDLING_CHECK(state_ != nullptr, "kindling::dist::Work::wait: this Work refers to no operation");
  if (state_->waited) return;
  state_->waited = true;
  if (state_->group == nullptr) return;  // complete from the start
  try {
    state_->op->wait(detail::wait_timeout(*state_->group, !state_->collective));
  } catch (const kindling::Error&) {
    throw;
  } catch (const std::exception& e) {
    detail::translate(e, *state_->group, state_->name, state_->seq);
  }
}

bool Work::is_completed() const { return state_ == nullptr || state_->op->is_completed(); }

int Work::source_rank() const {
  KINDLING_CHECK(state_ != nullptr, "kindling::dist::Work::source_rank: this Work refers to no operation");
  int idx = state_->op->source_rank();
  return idx < 0 ? -1 : state_->group->global_rank(idx);
}

namespace detail {

namespace {
template <typename T>
T reduce_number(T value, ReduceOp op, const Group& group, at::ScalarType dtype) {
  check_bitwise(op, dtype, "all_reduce");
  auto g = participant(group, "all_reduce");
  if (!g) return value;
  at::Tensor t = at::empty({1}, at::TensorOptions().dtype(dtype).device(device()));
  t.fill_(at::Scalar(value));
  all_reduce(t, op, group);
  return t.to(at::kCPU).item<T>();
}
}  // namespace

double all_reduce_number(double value, ReduceOp op, const Group& group) {
  return reduce_number<double>(value, op, group, at::kDouble);
}
int64_t all_reduce_number(int64_t value, ReduceOp op, const Group& group) {
  return reduce_number<int64_t>(value, op, group, at::kLong);
}
uint64_t all_reduce_number(uint64_t value, ReduceOp op, const Group& group) {
  KINDLING_CHECK(value <= static_cast<uint64_t>(INT64_MAX), "kindling::dist::all_reduce: unsigned value ", value,
                 " does not fit the engine's int64; reduce it as a tensor instead");
  return static_cast<uint64_t>(reduce_number<int64_t>(static_cast<int64_t>(value), op, group, at::kLong));
}

std::vector<std::string> all_gather_bytes(const std::string& bytes, const Group& group) {
  auto g = participant(group, "all_gather");
  if (!g) return {bytes};
  // Lengths first, then every payload padded to the longest one.
  at::Tensor len = at::empty({1}, at::TensorOptions().dtype(at::kLong).device(device()));
  len.fill_(static_cast<int64_t>(bytes.size()));
  at::Tensor lens = all_gather(len, group).to(at::kCPU);
  const int64_t max_len = std::max<int64_t>(1, lens.max().item<int64_t>());
  at::Tensor buf = at::zeros({max_len}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(buf.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  at::Tensor all = all_gather(buf.to(device()).unsqueeze(0), group).to(at::kCPU).contiguous();
  std::vector<std::string> out;
  const auto* lp = lens.data_ptr<int64_t>();
  const auto* data = all.data_ptr<uint8_t>();
  for (int64_t i = 0; i < lens.numel(); ++i) {
    out.emplace_back(reinterpret_cast<const char*>(data + i * max_len), static_cast<std::size_t>(lp[i]));
  }
  return out;
}

std::string broadcast_bytes(const std::string* bytes, int src, const Group& group) {
  auto g = participant(group, "broadcast");
  if (!g) return bytes ? *bytes : std::string();
  at::Tensor len = at::empty({1}, at::TensorOptions().dtype(at::kLong).device(device()));
  len.fill_(static_cast<int64_t>(bytes ? bytes->size() : 0));
  const int64_t n = broadcast(len, src, group).to(at::kCPU).item<int64_t>();
  at::Tensor buf = at::empty({std::max<int64_t>(n, 1)}, at::TensorOptions().dtype(at::kByte));
  if (bytes) std::memcpy(buf.data_ptr<uint8_t>(), bytes->data(), bytes->size());
  buf = broadcast(buf.to(device()), src, group).to(at::kCPU).contiguous();
  return std::string(reinterpret_cast<const char*>(buf.data_ptr<uint8_t>()), static_cast<std::size_t>(n));
}

void encode_tensor(ByteWriter& out, const at::Tensor& tensor) {
  KINDLING_CHECK(tensor.defined(), "kindling::dist: cannot serialize an undefined tensor");
  at::Tensor t = tensor.to(at::kCPU).contiguous();
  out.pod<int8_t>(static_cast<int8_t>(t.scalar_type()));
  out.pod<uint32_t>(static_cast<uint32_t>(t.dim()));
  for (auto d : t.sizes()) out.pod<int64_t>(d);
  out.write(t.data_ptr(), t.nbytes());
}

at::Tensor decode_tensor(ByteReader& in) {
  auto dtype = static_cast<at::ScalarType>(in.pod<int8_t>());
  auto ndim = in.pod<uint32_t>();
  KINDLING_CHECK(ndim < 64, "kindling::dist deserialization: implausible tensor rank ", ndim);
  std::vector<int64_t> sizes(ndim);
  for (auto& d : sizes) d = in.pod<int64_t>();
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype));
  in.read(t.data_ptr(), t.nbytes());
  return t;
}

}  // namespace detail

OneRankFirst::OneRankFirst(int rank, bool local) : uncaught_(std::uncaught_exceptions()) {
  const int size = local ? get_nproc_per_node() : get_world_size();
  KINDLING_CHECK(rank >= 0 && rank < size, "kindling::dist::one_rank_first: rank should be between 0 and ", size - 1,
                 ", but given ", rank, local ? " (a local rank)" : "");
  chosen_ = (local ? get_local_rank() : get_rank()) == rank;
  if (!chosen_) barrier();
}

OneRankFirst::~OneRankFirst() noexcept(false) {
  if (chosen_ && std::uncaught_exceptions() == uncaught_) barrier();
}

}  // namespace dist
}  // namespace kindling
