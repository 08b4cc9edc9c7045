// ZeroRedundancyOptimizer's exchanges: the comm hook's reduce-scatter (and, with
// overlap_with_ddp, the thread that completes each bucket's as soon as it is in) and the
// all-gather of the updated chunks (zero_exchange.h).
#include "zero_exchange.h"

#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "kindling/dist/dist.h"
#include "kindling/error.h"

namespace kindling {
namespace nn {
namespace zero {

namespace {

// A bucket's reduce-scatter in flight; once it is in, this rank's chunk becomes the group's
// average and the optimizer hears of it (when it steps inside backward).
struct ExchangeState {
  at::Tensor own;    // this rank's chunk of the bucket
  at::Tensor input;  // the reduce-scatter's input: the bucket, padded where its length needs it
  at::Tensor sum;    // the reduce-scatter's result: the chunks' sum, in rank order (padded)
  int size = 1;
  dist::Work work;
  std::shared_ptr<HookRecords> records;
  GradBucket bucket;
  // Set by complete() when it runs on the hook's thread.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  void complete() {
    work.wait();
    // Divided after the sum (as DDP's own all-reduce and division).
    if (own.numel() > 0) own.copy_(sum.narrow(0, 0, own.numel()).div_(static_cast<int64_t>(size)));
    std::function<void(const GradBucket&)> after;
    {
      std::lock_guard<std::mutex> lock(records->mu);
      after = records->after_reduce;
    }
    if (after) after(bucket);
  }
};

// `flat` with zeros after it up to `numel` elements (a copy), or `flat` itself when it has them.
at::Tensor padded(const at::Tensor& flat, int64_t numel) {
  if (flat.numel() == numel) return flat;
  at::Tensor whole = at::empty({numel}, flat.options());
  whole.narrow(0, 0, flat.numel()).copy_(flat);
  whole.narrow(0, flat.numel(), numel - flat.numel()).zero_();
  return whole;
}

// Runs jobs one after the other, in the order posted, on a thread of its own; the destructor
// runs what is left, then joins.
class Progress {
 public:
  Progress() : thread_([this] { loop(); }) {}
  ~Progress() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

// DDP's handle on a bucket: completes the exchange itself, or waits for the hook's thread to.
class Exchange : public PendingBucket {
 public:
  Exchange(std::shared_ptr<ExchangeState> state, Progress* progress) : state_(std::move(state)) {
    if (progress == nullptr) return;
    progress->post([state = state_] {
      std::exception_ptr error;
      try {
        at::NoGradGuard no_grad;
        state->complete();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(state->mu);
      state->error = error;
      state->done = true;
      state->cv.notify_all();
    });
    threaded_ = true;
  }
  void wait() override {
    if (!threaded_) {
      state_->complete();
    } else {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait(lock, [this] { return state_->done; });
      if (state_->error) std::rethrow_exception(state_->error);
    }
    std::function<void(const GradBucket&)> after;
    {
      std::lock_guard<std::mutex> lock(state_->records->mu);
      after = state_->records->after_wait;
    }
    if (after) after(state_->bucket);
  }

 private:
  std::shared_ptr<ExchangeState> state_;
  bool threaded_ = false;
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
  // Bucket 0 comes first in every synchronised backward (the later ones may find this
  // backward's own first steps done already).
  KINDLING_CHECK(bucket.index != 0 || !records.awaiting_step,
                 "kindling::nn::ZeroRedundancyOptimizer (overlap_with_ddp): a synchronised "
                 "backward on rank ",
                 group.rank(),
                 " before step() finished the previous one; that backward stepped "
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
                 "kindling::nn::ZeroRedundancyOptimizer: DDP's bucket ", index,
                 " changed since the first "
                 "synchronised backward (",
                 known.params.size(), " parameters, ", known.numel, " elements then; ", seen.params.size(), " and ",
                 seen.numel,
                 " now); its shards follow the first layout: keep one "
                 "DDP model per optimizer and do not change its parameters");
}

// What Join needs (comm_hook.h): with overlap_with_ddp the hook steps inside backward; without,
// the optimizer's step() all-gathers the chunks the hook reduced.
const JoinNeeds kJoinStepsInBackward{
    "the model reduces through the hook of a ZeroRedundancyOptimizer made with ZeroOptions::overlap_with_ddp, which "
    "steps inside backward, before Join could scale the gradients of the ranks still training: make that optimizer "
    "without overlap_with_ddp to train with Join",
    ""};
const JoinNeeds kJoinNeedsTheStep{"", "the model reduces through a ZeroRedundancyOptimizer's hook, whose step() the "
                                      "training ranks run together; pass it: join.join([&] { optimizer.step(); })"};

class ZeroHook : public CommHook {
 public:
  ZeroHook(std::shared_ptr<HookRecords> records, bool steps)
      : records_(std::move(records)), progress_(steps ? std::make_unique<Progress>() : nullptr) {}
  std::string name() const override { return progress_ ? "zero_reduce_scatter_and_step" : "zero_reduce_scatter"; }
  JoinNeeds join_needs() const override { return progress_ ? kJoinStepsInBackward : kJoinNeedsTheStep; }
  std::unique_ptr<PendingBucket> run(GradBucket& bucket, const dist::Group& group) override {
    record(*records_, bucket, group);
    const int size = group.size();
    const int rank = group.rank();
    if (size == 1) return std::make_unique<Done>();
    at::Tensor flat = bucket.buffer.view(-1);
    const int64_t each = (flat.numel() + size - 1) / size;  // the chunks' length (the last ones padded)
    const auto [lo, hi] = chunk(flat.numel(), rank, size);
    auto state = std::make_shared<ExchangeState>();
    state->own = flat.narrow(0, lo, hi - lo);
    state->sum = at::empty({each}, flat.options());
    state->size = size;
    state->records = records_;
    state->bucket = bucket;
    state->input = padded(flat, each * size);
    state->work = dist::reduce_scatter_async(state->sum, state->input, dist::ReduceOp::kSum, group);
    return std::make_unique<Exchange>(std::move(state), progress_.get());
  }

 private:
  std::shared_ptr<HookRecords> records_;
  std::unique_ptr<Progress> progress_;  // with overlap_with_ddp
};

}  // namespace

Gather::Gather(const Bucket& bucket, const std::vector<at::Tensor>& params, const dist::Group& group)
    : bucket_(bucket), rank_(group.rank()), size_(group.size()) {
  for (std::size_t p : bucket.params) flat_.push_back(params[p].detach().view(-1));
  each_ = (bucket.numel + size_ - 1) / size_;
  const auto [lo, hi] = chunk(bucket.numel, rank_, size_);
  mine_ = at::empty({each_}, flat_.front().options());  // past hi: padding, never read
  for_each_overlap(bucket, lo, hi, [&](std::size_t m, int64_t offset, int64_t pos, int64_t length) {
    mine_.narrow(0, pos - lo, length).copy_(flat_[m].narrow(0, offset, length));
  });
  all_ = at::empty({each_ * size_}, mine_.options());
  work_ = dist::all_gather_into_async(all_, mine_, group);
}

void Gather::finish() {
  work_.wait();
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const auto [qlo, qhi] = chunk(bucket_.numel, q, size_);
    const at::Tensor theirs = all_.narrow(0, q * each_, each_);
    for_each_overlap(bucket_, qlo, qhi, [&](std::size_t m, int64_t offset, int64_t pos, int64_t length) {
      flat_[m].narrow(0, offset, length).copy_(theirs.narrow(0, pos - qlo, length));
    });
  }
}

std::shared_ptr<CommHook> make_hook(std::shared_ptr<HookRecords> records, bool steps) {
  return std::make_shared<ZeroHook>(std::move(records), steps);
}

}  // namespace zero
}  // namespace nn
}  // namespace kindling
