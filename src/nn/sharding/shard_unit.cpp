// One unit's flat buffer, its shard and the views between them (src/nn/sharding/shard_unit.h).
#include "nn/sharding/shard_unit.h"

#include <torch/csrc/autograd/generated/variable_factories.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "kindling/error.h"

namespace kindling {
namespace nn {
namespace detail {

namespace {
// Elements [from, from + n) of the flat `buffer`, sharing its memory but not an autograd view of
// it (as DDP's bucket views): LibTorch's zero_grad() detaches gradients in place, which views refuse.
at::Tensor alias(const at::Tensor& buffer, int64_t from, int64_t n) {
  return at::empty({0}, buffer.options()).set_(buffer.storage(), buffer.storage_offset() + from, {n}, {1});
}
}  // namespace

ShardUnit::ShardUnit(std::string name, std::vector<at::Tensor> params, std::vector<std::string> names, int world,
                     int rank, std::optional<at::ScalarType> compute, std::optional<at::ScalarType> reduce)
    : name_(std::move(name)), params_(std::move(params)), names_(std::move(names)) {
  for (const auto& p : params_) {
    offsets_.push_back(numel_);
    sizes_.push_back(p.numel());
    shapes_.push_back(p.sizes().vec());
    numel_ += p.numel();
  }
  chunk_ = std::max<int64_t>(1, (numel_ + world - 1) / world);
  rank_begin_ = chunk_ * rank;
  at::NoGradGuard no_grad;
  const auto options = params_.front().options().requires_grad(false);
  at::Tensor whole = at::zeros({chunk_ * world}, options);
  for (std::size_t i = 0; i < params_.size(); ++i)
    whole.narrow(0, offsets_[i], sizes_[i]).copy_(params_[i].reshape({-1}));
  shard_ = whole.narrow(0, rank_begin_, chunk_).clone();
  full_ = compute && *compute != whole.scalar_type() ? whole.to(*compute) : whole;
  reduce_dtype_ = reduce.value_or(shard_.scalar_type());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    // This rank's part of parameter i: [offset, offset + numel) within [begin, begin + chunk).
    const int64_t from = std::min(std::max(offsets_[i], rank_begin_), rank_begin_ + chunk_);
    const int64_t to = std::max(std::min(offsets_[i] + sizes_[i], rank_begin_ + chunk_), from);
    shards_.push_back(alias(shard_, from - rank_begin_, to - from).requires_grad_(true));
    shard_begin_.push_back(from - rank_begin_);
  }
  ready.assign(params_.size(), false);
  show();
}

void ShardUnit::show() {
  for (std::size_t i = 0; i < params_.size(); ++i)
    params_[i].set_data(full_.narrow(0, offsets_[i], sizes_[i]).view(shapes_[i]));
  gathered_ = true;
}

void ShardUnit::allocate() {
  if (full_.storage().nbytes() > 0) return;
  auto* storage = full_.storage().unsafeGetStorageImpl();
  const std::size_t bytes = static_cast<std::size_t>(full_.numel()) * full_.element_size();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
  storage->set_nbytes(bytes);
}

void ShardUnit::free() {
  if (!gathered_) return;
  // Autograd may hold views of the buffer for backward: the storage object stays, its memory
  // goes, and allocate() gives it memory again before they are read (FSDP's way to free).
  auto* storage = full_.storage().unsafeGetStorageImpl();
  for (auto& p : params_) p.set_data(at::empty({0}, full_.options()));
  storage->set_data_ptr_noswap(storage->allocator()->allocate(0));
  storage->set_nbytes(0);
  gathered_ = false;
}

void ShardUnit::leave_module() noexcept {
  try {
    const at::Tensor nan = at::full({}, std::numeric_limits<double>::quiet_NaN(), shard_.options().requires_grad(false));
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!gathered_ || params_[i].scalar_type() != shard_.scalar_type()) params_[i].set_data(nan.expand(shapes_[i]));
  } catch (...) {  // left as they are: empty under ZeRO-3
  }
}

int64_t ShardUnit::shard_version() const {
  // The parts are tensors of their own (not views of the shard): each counts its own changes.
  int64_t v = shard_._version();
  for (const auto& s : shards_) v += s._version();
  return v;
}

const at::Tensor& ShardUnit::gather_input() {
  if (shard_.scalar_type() == full_.scalar_type()) return shard_;
  send_ = shard_.to(full_.scalar_type());
  return send_;
}

void ShardUnit::remember_versions() {
  param_versions.clear();
  for (const auto& p : params_) param_versions.push_back(p._version());
}

int ShardUnit::changed_param() const {
  for (std::size_t i = 0; i < params_.size() && i < param_versions.size(); ++i)
    if (params_[i]._version() != param_versions[i]) return static_cast<int>(i);
  return -1;
}

void ShardUnit::take_gradient(std::size_t i, const at::Tensor& scale) {
  at::Tensor& grad = params_[i].mutable_grad();
  KINDLING_CHECK(grad.defined() && !grad.is_sparse(), "kindling::nn::FullyShardedDataParallel: parameter '", names_[i],
                 "' has ", grad.defined() ? "a sparse" : "no", " gradient after its accumulation; only dense gradients are "
                 "supported");
  if (!grad_full.defined()) grad_full = at::zeros({full_.numel()}, full_.options().dtype(reduce_dtype_));
  // Scaled while copied (as DDP does), so that the reduction's sum is the average.
  at::Tensor into = grad_full.narrow(0, offsets_[i], sizes_[i]);
  at::mul_out(into, grad.reshape({-1}), scale);
  grad = at::Tensor();
}

void ShardUnit::add_to_shard_grads() {
  at::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& s = shards_[i];
    at::Tensor mine = alias(grad_shard, shard_begin_[i], s.numel());
    if (mine.scalar_type() != s.scalar_type()) mine = mine.to(s.scalar_type());
    at::Tensor& g = s.mutable_grad();
    if (g.defined()) {
      g.add_(mine);
    } else {
      g = mine;  // views of this iteration's grad_shard, which nothing else holds
    }
  }
}

void ShardUnit::reset_iteration() {
  backward_entered = false;
  std::fill(ready.begin(), ready.end(), false);
  ready_count = 0;
  grad_full = at::Tensor();
  grad_shard = at::Tensor();
  send_ = at::Tensor();
}

}  // namespace detail
}  // namespace nn
}  // namespace kindling
