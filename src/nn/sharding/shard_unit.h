#pragma once
// One unit of a sharded model (kindling/nn/sharding.h): where its parameters lie in its flat
// buffer, this rank's chunk of it, and the buffers of one iteration. Local operations only; the
// collectives that fill and empty them are ShardedModel::State's (sharding_state.h).
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"

namespace kindling {
namespace nn {
namespace detail {

class ShardUnit {
 public:
  // `params` (the module's tensors, whole), `names` theirs; `world` ranks, this one `rank`.
  // Copies the parameters' values into this rank's shard and makes each parameter a view of the
  // whole buffer (left gathered). Local; does not throw.
  // `compute`: the dtype of the whole buffer, which the parameters view (unset: theirs);
  // `reduce`: that of the gradients' reduction (unset: the shard's, the parameters' own).
  ShardUnit(std::string name, std::vector<at::Tensor> params, std::vector<std::string> names, int world, int rank,
            std::optional<at::ScalarType> compute = std::nullopt, std::optional<at::ScalarType> reduce = std::nullopt);

  const std::string& name() const { return name_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  // Per parameter, this rank's part of it (1-D leaves sharing the shard's memory; some empty).
  const std::vector<at::Tensor>& shards() const { return shards_; }
  // The shard (this rank's chunk, `chunk()` elements) and the whole buffer (world * chunk).
  const at::Tensor& shard() const { return shard_; }
  const at::Tensor& full() const { return full_; }
  int64_t chunk() const { return chunk_; }
  // Where parameter i starts in the whole buffer.
  int64_t offset(std::size_t i) const { return offsets_[i]; }
  // Where shards()[i] starts in the shard, and in its parameter (flat).
  int64_t shard_begin(std::size_t i) const { return shard_begin_[i]; }
  int64_t piece_offset(std::size_t i) const {
    return shards_[i].numel() == 0 ? 0 : rank_begin_ + shard_begin_[i] - offsets_[i];  // an empty one: anywhere
  }
  // Parameter i's shape and size (also while it is freed).
  at::IntArrayRef shape(std::size_t i) const { return shapes_[i]; }
  int64_t size(std::size_t i) const { return sizes_[i]; }
  // Elements of the parameters (without the padding).
  int64_t numel() const { return numel_; }

  // --- The whole buffer's memory.
  bool gathered() const { return gathered_; }
  // Whether the whole buffer holds memory (gathered, or its gather in flight).
  bool allocated() const { return full_.storage().nbytes() > 0; }
  // Gives the buffer its memory back (left undefined until the gather fills it). Local.
  void allocate();
  // Frees the buffer's memory; the parameters become empty tensors. Local.
  void free();
  // As the model is destroyed (the module outlives it): each parameter not whole in the shards'
  // dtype (freed under ZeRO-3, or gathered in param_dtype) becomes NaN of its shape in the shards'
  // dtype, taking no memory (one element, expanded): a destructor cannot gather. Does not throw.
  void leave_module() noexcept;
  // After the gather filled the buffer: the parameters are its views again. Local.
  void show();
  // The shard's version now (the optimizer's steps change it) and at the last gather.
  int64_t shard_version() const;
  int64_t gathered_version = -1;
  int64_t gathering_version = -1;  // the shard's version when the gather in flight started
  bool stepped_since_gather = true;  // a synchronised backward since the last gather
  // The parameters' versions where kindling left them (checked: changed outside kindling?).
  std::vector<int64_t> param_versions;
  void remember_versions();
  // The first parameter changed outside kindling since remember_versions(), or -1.
  int changed_param() const;

  // What a gather sends: the shard, or its copy in the whole buffer's dtype (kept until the
  // gather ends). Local.
  const at::Tensor& gather_input();

  // --- One iteration.
  dist::Work gather_work;  // valid while a gather is in flight
  bool backward_entered = false;  // its outputs' gradient reached (ZeRO-3 gathers it back then)
  std::vector<bool> ready;       // per parameter: its gradient accumulated in this backward
  std::size_t ready_count = 0;
  at::Tensor grad_full;  // the scaled gradients, end to end (padding zero)
  at::Tensor grad_shard; // this rank's chunk of their sum
  dist::Work reduce_work;  // valid while the reduction is in flight
  // Moves parameter `i`'s accumulated gradient into grad_full, times `scale`, and drops it.
  void take_gradient(std::size_t i, const at::Tensor& scale);
  // Adds grad_shard (after its reduction) to the shards' `.grad()`. Local.
  void add_to_shard_grads();
  void reset_iteration();

 private:
  std::string name_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<int64_t> offsets_, sizes_;
  std::vector<std::vector<int64_t>> shapes_;
  int64_t numel_ = 0, chunk_ = 0, rank_begin_ = 0;
  at::Tensor full_, shard_, send_;
  at::ScalarType reduce_dtype_;
  std::vector<at::Tensor> shards_;
  std::vector<int64_t> shard_begin_;  // where each of shards_ starts in the shard
  bool gathered_ = true;
};

}  // namespace detail
}  // namespace nn
}  // namespace kindling
