// Numbers, strings and objects through the collectives (as byte tensors on device()), the
// tensor codec of kindling/dist/serialize.h, and one_rank_first's guard.
#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "dist/collectives/call.h"
#include "kindling/dist/serialize.h"

namespace kindling {
namespace dist {

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
  KINDLING_CHECK(n >= 0, "kindling::dist::broadcast: rank ", src, " announced a negative length ", n);
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
  if (t.nbytes() > 0) out.write(t.data_ptr(), t.nbytes());  // an empty tensor's data pointer is null
}

at::Tensor decode_tensor(ByteReader& in) {
  // Everything a peer declares is checked against the message before anything is
  // allocated, so a corrupt or hostile message throws instead of exhausting memory.
  const int code = in.pod<int8_t>();
  KINDLING_CHECK(code >= 0 && code < static_cast<int>(at::ScalarType::NumOptions) &&
                     code != static_cast<int>(at::ScalarType::Undefined),
                 "kindling::dist deserialization: unknown tensor dtype code ", code);
  const auto dtype = static_cast<at::ScalarType>(code);
  auto ndim = in.pod<uint32_t>();
  KINDLING_CHECK(ndim < 64, "kindling::dist deserialization: implausible tensor rank ", ndim);
  std::vector<int64_t> sizes(ndim);
  for (auto& d : sizes) {
    d = in.pod<int64_t>();
    KINDLING_CHECK(d >= 0, "kindling::dist deserialization: negative tensor size ", d);
  }
  if (std::find(sizes.begin(), sizes.end(), 0) == sizes.end()) {
    const uint64_t fits = in.remaining() / c10::elementSize(dtype);  // elements the message can hold
    uint64_t count = 1;
    for (int64_t d : sizes) {
      KINDLING_CHECK(count <= fits / static_cast<uint64_t>(d),
                     "kindling::dist deserialization: the tensor's declared shape ", c10::IntArrayRef(sizes),
                     " needs more data than the message holds (", in.remaining(),
                     " bytes left); the sender and receiver disagree on the value's type");
      count *= static_cast<uint64_t>(d);
    }
  }
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype));
  if (t.nbytes() > 0) in.read(t.data_ptr(), t.nbytes());  // memcpy to null is undefined (UBSan)
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
