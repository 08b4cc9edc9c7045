// ZeroRedundancyOptimizer's buckets, chunks and parts, its comm hook's reduce-scatter and the
// all-gather of the updated chunks (zero_layout.h).
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
      pieces.push_back({buckets[b].params[m], offset, length, static_cast<int64_t>(b), m});
    });
  }
  for (std::size_t p : unbucketed) pieces.push_back({p, 0, -1, -1, 0});
  std::stable_sort(pieces.begin(), pieces.end(),
                   [&](const Piece& a, const Piece& b) { return group_of[a.param] < group_of[b.param]; });
  return pieces;
}

namespace {

// Tags of the exchanges: one per bucket and direction, apart from small user tags (MPI
// guarantees 32767).
int reduce_tag(int64_t bucket) { return 20000 + static_cast<int>(bucket % 6000); }
int gather_tag(int64_t bucket) { return 26000 + static_cast<int>(bucket % 6000); }

// A bucket's exchanges in flight; on wait, this rank's chunk becomes the group's average, and
// the optimizer hears of it when it steps inside backward.
class Exchange : public PendingBucket {
 public:
  Exchange(at::Tensor own, int rank, int size, std::shared_ptr<HookRecords> records, const GradBucket& bucket)
      : own_(std::move(own)), rank_(rank), received_(size), records_(std::move(records)), bucket_(bucket) {}
  void add_send(dist::Work work) { works_.push_back(std::move(work)); }
  void add_receive(int q, at::Tensor buffer, dist::Work work) {
    received_[q] = std::move(buffer);
    works_.push_back(std::move(work));
  }
  void wait() override {
    for (auto& w : works_) w.wait();
    if (own_.numel() > 0) {
      // Summed in rank order, then divided (as DDP's own all-reduce and division).
      at::Tensor sum = (rank_ == 0 ? own_ : received_[0]).clone();
      for (std::size_t q = 1; q < received_.size(); ++q) sum.add_(static_cast<int>(q) == rank_ ? own_ : received_[q]);
      own_.copy_(sum.div_(static_cast<int64_t>(received_.size())));
    }
    std::function<void(const GradBucket&)> after;
    {
      std::lock_guard<std::mutex> lock(records_->mu);
      after = records_->after_reduce;
    }
    if (after) after(bucket_);
  }

 private:
  at::Tensor own_;
  int rank_;
  std::vector<at::Tensor> received_;
  std::vector<dist::Work> works_;
  std::shared_ptr<HookRecords> records_;
  GradBucket bucket_;
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
  KINDLING_CHECK(!records.awaiting_step, "kindling::nn::ZeroRedundancyOptimizer (overlap_with_ddp): a synchronised "
                 "backward on rank ", group.rank(), " before step() finished the previous one; that backward stepped "
                 "this rank's chunks and the others' arrive in step(): call optimizer.step() after every synchronised "
                 "backward (accumulate inside model.no_sync() instead)");
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
  ZeroHook(std::shared_ptr<HookRecords> records, bool steps) : records_(std::move(records)), steps_(steps) {}
  std::string name() const override { return steps_ ? "zero_reduce_scatter_and_step" : "zero_reduce_scatter"; }
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override {
    record(*records_, bucket, group);
    const int size = group.size();
    const int rank = group.rank();
    if (size == 1) return std::make_unique<Done>();
    at::Tensor flat = bucket.buffer.view(-1);
    const std::vector<int> ranks = group.ranks();
    const int tag = reduce_tag(bucket.index);
    const auto [lo, hi] = chunk(flat.numel(), rank, size);
    auto exchange = std::make_unique<Exchange>(flat.narrow(0, lo, hi - lo), rank, size, records_, bucket);
    // Receives before sends (here and in Gather): on gloo, two ranks that both send first can stall
    // each other; measured across 2 hosts at 1 Gbit/s, 22.4 MB each way took 190-373 ms (median
    // 342) sends first and 186-192 ms receives first (an all-reduce's rate).
    for (int q = 0; q < size && hi > lo; ++q) {
      if (q == rank) continue;
      at::Tensor into = at::empty({hi - lo}, flat.options());
      exchange->add_receive(q, into, dist::irecv(into, ranks[q], tag, group));
    }
    for (int q = 0; q < size; ++q) {
      const auto [qlo, qhi] = chunk(flat.numel(), q, size);
      if (q != rank && qhi > qlo) exchange->add_send(dist::isend(flat.narrow(0, qlo, qhi - qlo), ranks[q], tag, group));
    }
    return exchange;
  }

 private:
  std::shared_ptr<HookRecords> records_;
  bool steps_;
};

}  // namespace

Gather::Gather(const Bucket& bucket, int64_t index, const std::vector<at::Tensor>& params, const dist::Group& group)
    : bucket_(bucket), rank_(group.rank()), received_(static_cast<std::size_t>(group.size())) {
  for (std::size_t p : bucket.params) flat_.push_back(params[p].detach().view(-1));
  const int size = group.size();
  const std::vector<int> ranks = group.ranks();
  const int tag = gather_tag(index);
  const auto [lo, hi] = chunk(bucket.numel, rank_, size);
  at::Tensor mine = at::empty({hi - lo}, flat_.front().options());
  for_each_overlap(bucket, lo, hi, [&](std::size_t m, int64_t offset, int64_t pos, int64_t length) {
    mine.narrow(0, pos - lo, length).copy_(flat_[m].narrow(0, offset, length));
  });
  received_[static_cast<std::size_t>(rank_)] = mine;  // kept alive until the sends are done
  for (int q = 0; q < size; ++q) {  // receives first: see ZeroHook::run
    const auto [qlo, qhi] = chunk(bucket.numel, q, size);
    if (q == rank_ || qhi == qlo) continue;
    received_[static_cast<std::size_t>(q)] = at::empty({qhi - qlo}, mine.options());
    works_.push_back(dist::irecv(received_[static_cast<std::size_t>(q)], ranks[q], tag, group));
  }
  for (int q = 0; q < size && hi > lo; ++q)
    if (q != rank_) works_.push_back(dist::isend(mine, ranks[q], tag, group));
}

void Gather::finish() {
  for (auto& w : works_) w.wait();
  works_.clear();
  const int size = static_cast<int>(received_.size());
  for (int q = 0; q < size; ++q) {
    if (q == rank_) continue;
    const auto [qlo, qhi] = chunk(bucket_.numel, q, size);
    for_each_overlap(bucket_, qlo, qhi, [&](std::size_t m, int64_t offset, int64_t pos, int64_t length) {
      flat_[m].narrow(0, offset, length).copy_(received_[static_cast<std::size_t>(q)].narrow(0, pos - qlo, length));
    });
  }
}

std::shared_ptr<CommHook> make_hook(std::shared_ptr<HookRecords> records, bool steps) {
  return std::make_shared<ZeroHook>(std::move(records), steps);
}

}  // namespace zero
}  // namespace nn
}  // namespace kindling
