// ZeroRedundancyOptimizer's buckets, chunks and parts, and its comm hook's reduce-scatter
// (zero_layout.h).
#include "zero_layout.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/error.h"

namespace kindling {
namespace nn {
namespace zero {

std::pair<int64_t, int64_t> chunk(int64_t numel, int q, int size) {
  const int64_t each = (numel + size - 1) / size;
  const int64_t first = std::min(numel, each * q);
  return {first, std::min(numel, first + each)};
}

void for_each_overlap(const Bucket& bucket, int64_t lo, int64_t hi,
                      const std::function<void(std::size_t, int64_t, int64_t, int64_t)>& f) {
  for (std::size_t m = 0; m < bucket.params.size(); ++m) {
    const int64_t start = std::max(lo, bucket.offsets[m]);
    const int64_t end = std::min(hi, bucket.offsets[m] + bucket.numels[m]);
    if (start < end) f(m, start - bucket.offsets[m], start, end - start);
  }
}

std::vector<Piece> Layout::pieces_of(int q, const std::vector<std::size_t>& group_of) const {
  std::vector<Piece> pieces;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const auto [lo, hi] = chunk(buckets[b].numel, q, size);
    for_each_overlap(buckets[b], lo, hi, [&](std::size_t m, int64_t offset, int64_t, int64_t length) {
      pieces.push_back({buckets[b].params[m], offset, length, static_cast<int64_t>(b)});
    });
  }
  for (std::size_t p : unbucketed) pieces.push_back({p, 0, -1, -1});
  std::stable_sort(pieces.begin(), pieces.end(),
                   [&](const Piece& a, const Piece& b) { return group_of[a.param] < group_of[b.param]; });
  return pieces;
}

namespace {

// Tags of the exchanges: one per bucket, apart from small user tags (MPI guarantees 32767).
int tag_of(int64_t bucket) { return 20000 + static_cast<int>(bucket % 10000); }

// A bucket's exchanges in flight; on wait, this rank's chunk becomes the group's average.
class Exchange : public PendingBucket {
 public:
  Exchange(at::Tensor own, int rank, int size) : own_(std::move(own)), rank_(rank), received_(size) {}
  void add_send(dist::Work work) { works_.push_back(std::move(work)); }
  void add_receive(int q, at::Tensor buffer, dist::Work work) {
    received_[q] = std::move(buffer);
    works_.push_back(std::move(work));
  }
  void wait() override {
    for (auto& w : works_) w.wait();
    if (own_.numel() == 0) return;
    // Summed in rank order, then divided (as DDP's own all-reduce and division).
    at::Tensor sum = (rank_ == 0 ? own_ : received_[0]).clone();
    for (std::size_t q = 1; q < received_.size(); ++q) sum.add_(static_cast<int>(q) == rank_ ? own_ : received_[q]);
    own_.copy_(sum.div_(static_cast<int64_t>(received_.size())));
  }

 private:
  at::Tensor own_;
  int rank_;
  std::vector<at::Tensor> received_;
  std::vector<dist::Work> works_;
};

class Done : public PendingBucket {
 public:
  void wait() override {}
};

void record(HookRecords& records, const GradBucket& bucket, const dist::Group& group) {
  BucketRecord seen;
  seen.numel = bucket.buffer.numel();
  const int64_t base = bucket.buffer.storage_offset();
  for (std::size_t i = 0; i < bucket.parameters.size(); ++i) {
    seen.params.push_back(bucket.parameters[i].unsafeGetTensorImpl());
    seen.offsets.push_back(bucket.gradients[i].storage_offset() - base);
  }
  std::lock_guard<std::mutex> lock(records.mu);
  if (!records.group) records.group = group;
  const auto index = static_cast<std::size_t>(bucket.index);
  if (index == records.buckets.size()) {
    records.buckets.push_back(std::move(seen));
    return;
  }
  KINDLING_CHECK(index < records.buckets.size(), "kindling::nn::ZeroRedundancyOptimizer: bucket ", index,
                 " came before bucket ", records.buckets.size(), "; the hook must see buckets in index order");
  const BucketRecord& known = records.buckets[index];
  KINDLING_CHECK(known.params == seen.params && known.offsets == seen.offsets && known.numel == seen.numel,
                 "kindling::nn::ZeroRedundancyOptimizer: DDP's bucket ", index, " changed since the first "
                 "synchronised backward (", known.params.size(), " parameters, ", known.numel, " elements then; ",
                 seen.params.size(), " and ", seen.numel, " now); its shards follow the first layout: keep one "
                 "DDP model per optimizer and do not change its parameters");
}

class ZeroHook : public CommHook {
 public:
  explicit ZeroHook(std::shared_ptr<HookRecords> records) : records_(std::move(records)) {}
  std::string name() const override { return "zero_reduce_scatter"; }
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override {
    record(*records_, bucket, group);
    const int size = group.size();
    const int rank = group.rank();
    if (size == 1) return std::make_unique<Done>();
    at::Tensor flat = bucket.buffer.view(-1);
    const std::vector<int> ranks = group.ranks();
    const int tag = tag_of(bucket.index);
    const auto [lo, hi] = chunk(flat.numel(), rank, size);
    auto exchange = std::make_unique<Exchange>(flat.narrow(0, lo, hi - lo), rank, size);
    for (int q = 0; q < size; ++q) {
      if (q == rank) continue;
      const auto [qlo, qhi] = chunk(flat.numel(), q, size);
      if (qhi > qlo) exchange->add_send(dist::isend(flat.narrow(0, qlo, qhi - qlo), ranks[q], tag, group));
      if (hi > lo) {
        at::Tensor into = at::empty({hi - lo}, flat.options());
        exchange->add_receive(q, into, dist::irecv(into, ranks[q], tag, group));
      }
    }
    return exchange;
  }

 private:
  std::shared_ptr<HookRecords> records_;
};

}  // namespace

std::shared_ptr<CommHook> make_hook(std::shared_ptr<HookRecords> records) {
  return std::make_shared<ZeroHook>(std::move(records));
}

}  // namespace zero
}  // namespace nn
}  // namespace kindling
