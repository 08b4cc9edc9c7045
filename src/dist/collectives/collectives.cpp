// The tensor collectives of kindling::dist (all_reduce ... barrier) and empty_comm_buffer,
// on top of the backend-neutral Communicator interface (call.h: how a call reaches it).
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "dist/collectives/call.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

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
  run(*g, "all_reduce", [&](detail::Communicator& c) { return c.all_reduce(s.work, op); }, false, &s.work);
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
  run(*g, "all_gather", [&](detail::Communicator& c) { return c.all_gather(outs, s.work); }, false, &s.work);
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
                 "kindling::dist::all_gather_tensors_with_shapes: this rank's tensor has shape ",
                 detail::shape_str(mine), " but shapes[", g->group_rank, "] says ",
                 detail::shape_str(shapes[static_cast<std::size_t>(g->group_rank)]));
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
  auto headers =
      all_gather_object(Header{detail::to_vec(tensor.sizes()), static_cast<int>(tensor.scalar_type())}, group);
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
    out.push_back(
        all.select(0, static_cast<int64_t>(i)).narrow(0, 0, numel).view(headers[i].first).to(tensor.device()));
  }
  return out;
}

at::Tensor broadcast(const at::Tensor& tensor, int src, const Group& group) {
  auto g = participant(group, "broadcast");
  KINDLING_CHECK(tensor.defined(),
                 "kindling::dist::broadcast: the tensor is undefined on this rank; pass a tensor of "
                 "the source's shape and dtype, or use safe mode (std::optional, std::nullopt)");
  if (!g) return tensor;
  const int root = member_index(*g, src, "broadcast", "source");
  auto s = stage(tensor, "broadcast");
  run(*g, "broadcast", [&](detail::Communicator& c) { return c.broadcast(s.work, root); }, false, &s.work);
  if (s.copy_back) tensor.copy_(s.work);
  return tensor;
}

at::Tensor broadcast(const std::optional<at::Tensor>& tensor, int src, const Group& group) {
  const bool is_src = get_rank() == src;
  KINDLING_CHECK(!is_src || (tensor && tensor->defined()), "kindling::dist::broadcast: the source rank ", src,
                 " passed no tensor; the source must pass the data to broadcast");
  auto g = participant(group, "broadcast");
  if (!g) {
    // As the number and string forms: a non-member's missing tensor comes back undefined
    // (idist's None); in the serial model there is no source to take it from.
    KINDLING_CHECK((tensor && tensor->defined()) || is_initialized(), "kindling::dist::broadcast: rank ", get_rank(),
                   " passed no tensor (std::nullopt) but runs in the serial model (one process), where broadcast "
                   "returns its input (src=", src, "); pass a tensor on this rank");
    return tensor.value_or(at::Tensor());
  }
  member_index(*g, src, "broadcast", "source");
  using Header = std::pair<std::vector<int64_t>, int>;
  Header h;
  if (is_src) h = Header{detail::to_vec(tensor->sizes()), static_cast<int>(tensor->scalar_type())};
  h = broadcast_object(h, src, group);
  at::Tensor target =
      is_src ? *tensor
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
  run(*g, "reduce", [&](detail::Communicator& c) { return c.reduce(s.work, root, op); }, false, &s.work);
  if (s.copy_back) tensor.copy_(s.work);
  return tensor;
}

at::Tensor scatter(const at::Tensor& output, const std::vector<at::Tensor>& chunks, int src, const Group& group) {
  auto g = participant(group, "scatter");
  KINDLING_CHECK(output.defined(),
                 "kindling::dist::scatter: the output tensor is undefined; pass a tensor of the "
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
                     detail::shape_str(detail::to_vec(output.sizes())), " and dtype ",
                     c10::toString(output.scalar_type()), ", got ",
                     c.defined() ? detail::shape_str(detail::to_vec(c.sizes())) : std::string("undefined"));
      ins.push_back(stage(c, "scatter", "chunk").work);
    }
  } else {
    KINDLING_CHECK(chunks.empty(), "kindling::dist::scatter: only the source rank ", src,
                   " passes chunks; this rank passed ", chunks.size());
  }
  auto s = stage(output, "scatter", "output tensor");
  run(*g, "scatter", [&](detail::Communicator& c) { return c.scatter(s.work, ins, root); }, false, &s.work);
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
  run(*g, "gather", [&](detail::Communicator& c) { return c.gather(outs, s.work, root); }, false, &s.work);
  if (s.copy_back)
    for (auto& o : outs) o = o.to(tensor.device());
  return outs;
}

std::vector<at::Tensor> all_to_all(const std::vector<at::Tensor>& inputs, const Group& group) {
  auto g = participant(group, "all_to_all");
  if (!g) return inputs;
  const std::size_t n = g->ranks.size();
  KINDLING_CHECK(inputs.size() == n, "kindling::dist::all_to_all: got ", inputs.size(),
                 " input tensors for a group of ", n,
                 " ranks; pass one tensor per member (inputs[i] goes to the i-th member)");
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
                   g->global_rank(static_cast<int>(j)),
                   " sends another dtype than this rank; use one dtype everywhere");
    int64_t numel = 1;
    for (auto d : all[j].first[static_cast<std::size_t>(g->group_rank)]) numel *= d;
    out_splits.push_back(numel);
  }
  at::Tensor in = at::cat(flat_in);
  int64_t total = 0;
  for (auto v : out_splits) total += v;
  at::Tensor out = at::empty({total}, in.options());
  run(
      *g, "all_to_all", [&](detail::Communicator& c) { return c.all_to_all(out, in, out_splits, in_splits); }, false,
      &in, /*same_shape=*/false);
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

at::Tensor detail::Communicator::empty_buffer(at::IntArrayRef sizes, const at::TensorOptions& options) {
  return at::empty(sizes, options);
}

at::Tensor empty_comm_buffer(at::IntArrayRef sizes, const at::TensorOptions& options, const Group& group) {
  auto g = participant(group, "empty_comm_buffer");
  const auto opts = options.device_opt().has_value() ? options : options.device(device());
  if (!g || opts.device() != device()) return at::empty(sizes, opts);
  return g->comm->empty_buffer(sizes, opts);
}

}  // namespace dist
}  // namespace kindling
