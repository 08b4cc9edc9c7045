// DataLoader with worker threads and sample_rng() (see include/kindling/data/loader.h).
#include "kindling/data/loader.h"

#include <ATen/Context.h>

#include <condition_variable>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace data {

std::string DataLoaderOptions::to_string() const {
  std::ostringstream out;
  // auto_dataloader moves shuffle(true) into the DistributedSampler it makes: say so, rather
  // than a bare "shuffle=false" right after the program asked for a shuffle.
  const auto* distributed = dynamic_cast<const DistributedSampler*>(sampler_.get());
  const bool sampler_shuffles = distributed != nullptr && distributed->shuffle() && !shuffle_.value_or(false);
  out << "batch_size=" << batch_size_ << ", shuffle="
      << (sampler_shuffles ? "false (the DistributedSampler shuffles)"
                           : shuffle_ ? (*shuffle_ ? "true" : "false")
                                      : "unset")
      << ", num_workers=" << num_workers_ << ", prefetch_factor=" << prefetch_factor_
      << ", drop_last=" << (drop_last_ ? "true" : "false")
      << ", pin_memory=" << (pin_memory_ ? (*pin_memory_ ? "true" : "false") : "unset")
      << ", device=" << (device_ ? device_->str() : std::string("unset")) << ", seed=" << seed_
      << ", pad_shards=" << (pad_shards_ ? "true" : "false") << ", sampler=";
  if (!sampler_) {
    out << "none";
  } else if (const auto* d = distributed) {
    out << "DistributedSampler(num_replicas=" << d->num_replicas() << ", rank=" << d->rank()
        << ", shuffle=" << (d->shuffle() ? "true" : "false") << (d->pad() ? "" : ", pad=false") << ")";
  } else if (auto* p = dynamic_cast<const DistributedProxySampler*>(sampler_.get())) {
    out << "DistributedProxySampler(num_replicas=" << p->num_replicas() << ", rank=" << p->rank() << ")";
  } else if (dynamic_cast<const RandomSampler*>(sampler_.get())) {
    out << "RandomSampler";
  } else if (dynamic_cast<const SequentialSampler*>(sampler_.get())) {
    out << "SequentialSampler";
  } else {
    out << "user sampler";
  }
  return out.str();
}

Example collate(const std::vector<Example>& samples) {
  KINDLING_CHECK(!samples.empty(), "kindling::data::collate: no samples to stack");
  std::vector<at::Tensor> data, target;
  data.reserve(samples.size());
  target.reserve(samples.size());
  for (const auto& s : samples) {
    data.push_back(s.data);
    target.push_back(s.target);
  }
  return Example{at::stack(data), at::stack(target)};
}

namespace detail {

/// One epoch of a DataLoader: its batches, and the workers that load them ahead.
struct EpochRun {
  std::shared_ptr<const Dataset> dataset;
  std::vector<std::vector<int64_t>> batches;
  uint64_t seed = 0;
  int64_t epoch = 0;
  bool pin = false;
  std::optional<c10::Device> device;  // where batches are handed out
  int64_t window = 0;                 // batches that may be loaded ahead of the consumer
  bool threaded = false;

  std::mutex mutex;
  std::condition_variable work_cv;   // workers wait for room in the window
  std::condition_variable ready_cv;  // the consumer waits for its batch
  int64_t next_to_load = 0;
  int64_t consumed = 0;  // index of the batch the consumer holds + 1
  std::map<int64_t, Example> ready;
  std::map<int64_t, std::exception_ptr> failed;
  bool stopped = false;
  std::vector<std::thread> workers;

  int64_t position = -1;  // batch held in `current`
  Example current;

  ~EpochRun() { stop(); }

  int64_t count() const { return static_cast<int64_t>(batches.size()); }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopped = true;
    }
    work_cv.notify_all();
    ready_cv.notify_all();
    for (auto& t : workers) {
      if (t.joinable()) t.join();
    }
    workers.clear();
  }

  Example load(int64_t b) const {
    std::vector<Example> samples;
    samples.reserve(batches[static_cast<std::size_t>(b)].size());
    for (int64_t index : batches[static_cast<std::size_t>(b)]) {
      seed_sample_rng(seed, epoch, index);
      try {
        samples.push_back(dataset->get(index));
      } catch (const std::exception& e) {
        KINDLING_CHECK_T(Error, false, "kindling::data::DataLoader: loading sample ", index, " of ", dataset->name(),
                         " (batch ", b, ", epoch ", epoch, ") failed: ", e.what());
      }
    }
    Example batch = collate(samples);
    if (pin) {
      batch.data = batch.data.pin_memory();
      batch.target = batch.target.pin_memory();
    }
    return batch;
  }

  void start(int64_t num_workers) {
    threaded = num_workers > 0;
    for (int64_t w = 0; w < num_workers; ++w) workers.emplace_back([this] { work(); });
  }

  void work() {
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mutex);
        work_cv.wait(lock, [&] { return stopped || next_to_load >= count() || next_to_load < consumed + window; });
        if (stopped || next_to_load >= count()) return;
        b = next_to_load++;
      }
      Example batch;
      std::exception_ptr error;
      try {
        batch = load(b);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (error) {
          failed[b] = error;
        } else {
          ready[b] = std::move(batch);
        }
      }
      ready_cv.notify_all();
    }
  }

  /// Makes batch `b` current (waits for the workers when there are any), on `device`.
  void advance_to(int64_t b) {
    take(b);
    if (device && current.data.device() != *device) {
      current.data = current.data.to(*device, /*non_blocking=*/true);
      current.target = current.target.to(*device, /*non_blocking=*/true);
    }
  }

  // Makes batch `b` current as the loader produced it.
  void take(int64_t b) {
    position = b;
    if (!threaded) {
      consumed = b + 1;
      current = load(b);
      return;
    }
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mutex);
      KINDLING_CHECK(!stopped,
                     "kindling::data::DataLoader: this epoch was stopped because another epoch began on "
                     "the same loader; do not use an iterator after calling begin() again");
      ready_cv.wait(lock, [&] { return stopped || ready.count(b) > 0 || failed.count(b) > 0; });
      KINDLING_CHECK(!stopped,
                     "kindling::data::DataLoader: this epoch was stopped because another epoch began on "
                     "the same loader; do not use an iterator after calling begin() again");
      auto f = failed.find(b);
      if (f != failed.end()) {
        error = f->second;
      } else {
        auto it = ready.find(b);
        current = std::move(it->second);
        ready.erase(it);
      }
      consumed = b + 1;
    }
    work_cv.notify_all();
    if (error) {
      stop();
      std::rethrow_exception(error);
    }
  }
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  KINDLING_CHECK(dataset_ != nullptr, "kindling::data::DataLoader: the dataset is null");
  KINDLING_CHECK(options_.batch_size() >= 1, "kindling::data::DataLoader: batch_size must be at least 1, got ",
                 options_.batch_size());
  KINDLING_CHECK(options_.num_workers() >= 0, "kindling::data::DataLoader: num_workers must not be negative, got ",
                 options_.num_workers());
  KINDLING_CHECK(options_.prefetch_factor() >= 1,
                 "kindling::data::DataLoader: prefetch_factor must be at least 1, got ", options_.prefetch_factor());
  sampler_ = options_.sampler();
  if (sampler_) {
    KINDLING_CHECK(!options_.shuffle().value_or(false),
                   "kindling::data::DataLoader: shuffle=true and a sampler were both given; they are mutually "
                   "exclusive (the sampler decides the order): drop shuffle or the sampler");
  } else if (options_.shuffle().value_or(false)) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed());
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  bool pin = options_.pin_memory().value_or(dist::device().is_cuda());
  if (pin && !at::hasCUDA()) {
    if (options_.pin_memory().value_or(false)) {
      log(LogLevel::kWarning,
          "kindling::data::DataLoader: warning: pin_memory=true ignored: this LibTorch has no CUDA");
    }
    pin = false;
  }
  pin_ = pin;
}

DataLoader::~DataLoader() {
  if (auto run = active_.lock()) run->stop();
}
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&&) noexcept = default;

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size();
  const int64_t b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

void DataLoader::set_epoch(int64_t epoch) {
  KINDLING_CHECK(epoch >= 0, "kindling::data::DataLoader::set_epoch: epoch must not be negative, got ", epoch);
  next_epoch_ = epoch;
}

DataLoader::Iterator DataLoader::begin_at(int64_t first) {
  KINDLING_CHECK(first >= 0, "kindling::data::DataLoader::begin_at: the first batch must not be negative, got ", first);
  if (auto previous = active_.lock()) previous->stop();
  auto run = std::make_shared<detail::EpochRun>();
  run->dataset = dataset_;
  run->seed = options_.seed();
  run->epoch = next_epoch_;
  run->pin = pin_;
  run->device = options_.device();
  sampler_->set_epoch(next_epoch_);
  ++next_epoch_;
  const std::vector<int64_t> order = sampler_->indices();
  const auto bs = static_cast<std::size_t>(options_.batch_size());
  for (std::size_t i = 0; i < order.size(); i += bs) {
    const std::size_t end = std::min(order.size(), i + bs);
    if (end - i < bs && options_.drop_last()) break;
    run->batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                              order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  if (first >= run->count()) return end();
  run->window = options_.num_workers() * options_.prefetch_factor();
  run->next_to_load = first;
  run->consumed = first;
  run->start(std::min<int64_t>(options_.num_workers(), run->count() - first));
  active_ = run;
  run->advance_to(first);
  return Iterator(std::move(run));
}

DataLoader::Iterator::Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {}

const Example& DataLoader::Iterator::operator*() const {
  KINDLING_CHECK(run_ != nullptr, "kindling::data::DataLoader: dereferencing the end iterator");
  return run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  KINDLING_CHECK(run_ != nullptr, "kindling::data::DataLoader: incrementing the end iterator");
  const int64_t next = run_->position + 1;
  if (next >= run_->count()) {
    run_.reset();
  } else {
    run_->advance_to(next);
  }
  return *this;
}

bool DataLoader::Iterator::operator==(const Iterator& other) const { return run_ == other.run_; }

}  // namespace data

}  // namespace kindling
