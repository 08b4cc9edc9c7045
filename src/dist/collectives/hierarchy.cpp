// Hierarchical all-reduce over the hosts of a job (kindling/dist/hierarchy.h).
#include "kindling/dist/hierarchy.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "kindling/log.h"

namespace kindling {
namespace dist {

// One thread that runs steps 2 and 3 of each reduction once its step 1 completes, in the order
// of the calls (the order every rank issues them in). Hand-written: c10d's futures can chain a
// callback, but kindling's Work spans engines that have none (mpi).
class HostHierarchy::Pipeline {
 public:
  explicit Pipeline(const HostHierarchy& hosts) : hosts_(hosts) {}
  ~Pipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    ready_.notify_all();
    if (thread_.joinable()) thread_.join();  // after the reductions it holds, each bounded by the timeout
  }

  std::shared_future<void> push(Work host_step, const at::Tensor& tensor, ReduceOp op) {
    Task task{std::move(host_step), tensor, op, {}};
    std::shared_future<void> done = task.done.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    }
    ready_.notify_one();
    return done;
  }

 private:
  struct Task {
    Work host_step;
    at::Tensor tensor;
    ReduceOp op = ReduceOp::kSum;
    std::promise<void> done;
  };

  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      try {
        if (task.host_step.valid()) task.host_step.wait();
        hosts_.finish(task.tensor, task.op);
        task.done.set_value();
      } catch (...) {
        task.done.set_exception(std::current_exception());
      }
    }
  }

  const HostHierarchy& hosts_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Task> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

HostHierarchy::Reduction::Reduction() = default;
HostHierarchy::Reduction::Reduction(Reduction&&) noexcept = default;
HostHierarchy::Reduction& HostHierarchy::Reduction::operator=(Reduction&&) noexcept = default;

HostHierarchy::Reduction::~Reduction() {
  try {
    wait();
  } catch (const std::exception& e) {
    log(LogLevel::kError, e.what());
  }
}

void HostHierarchy::Reduction::wait() {
  if (flat_.valid()) flat_.wait();
  if (done_.valid()) {
    std::shared_future<void> done = std::move(done_);
    done_ = {};
    done.get();
  }
}

HostHierarchy::~HostHierarchy() = default;

HostHierarchy::HostHierarchy() {
  const int world = get_world_size(), rank = get_rank();
  const std::vector<std::string> names = all_gather(hostname());
  std::map<std::string, int> host_index;
  host_of_rank_.resize(world);
  for (int r = 0; r < world; ++r) {
    auto found = host_index.emplace(names[r], static_cast<int>(host_ranks_.size()));
    if (found.second) host_ranks_.emplace_back();
    host_ranks_[found.first->second].push_back(r);
    host_of_rank_[r] = found.first->second;
  }
  const auto& mine = host_ranks_[host_of_rank_[rank]];
  leader_ = mine.front();
  several_hosts_ = host_ranks_.size() > 1;
  if (!pays()) return;  // one host, or one rank per host: the flat all-reduce is the same
  // Every rank makes every group, in the same order (new_group is collective over the world).
  std::vector<int> leaders;
  for (const auto& ranks : host_ranks_) {
    leaders.push_back(ranks.front());
    if (ranks.size() > 1) {
      Group g = new_group(ranks);
      if (&ranks == &mine) host_group_ = g;
    }
  }
  for (const auto& ranks : host_ranks_) {
    if (ranks.size() > 1) {
      Group g = new_group(ranks);
      if (&ranks == &mine) host_broadcast_group_ = g;
    }
  }
  host_shared_ = mine.size() > 1;
  leaders_group_ = new_group(leaders);
  pipeline_ = std::make_unique<Pipeline>(*this);
}

double HostHierarchy::flat_link_bytes(double bytes) const {
  const int n = static_cast<int>(host_of_rank_.size());
  if (!several_hosts_) return 0;
  std::vector<int> edges_out(host_ranks_.size(), 0);
  for (int r = 0; r < n; ++r) {
    if (host_of_rank_[r] != host_of_rank_[(r + 1) % n]) ++edges_out[host_of_rank_[r]];
  }
  return *std::max_element(edges_out.begin(), edges_out.end()) * 2.0 * (n - 1) / n * bytes;
}

double HostHierarchy::hierarchical_link_bytes(double bytes) const {
  const double h = static_cast<double>(host_ranks_.size());
  return several_hosts_ ? 2.0 * (h - 1) / h * bytes : 0;
}

bool HostHierarchy::pays() const { return hierarchical_link_bytes(1.0) < flat_link_bytes(1.0); }

Work HostHierarchy::start_host_reduction(const at::Tensor& tensor, ReduceOp op) const {
  if (!pays()) return dist::all_reduce_async(tensor, op);  // the whole reduction, flat
  if (!host_shared_) return Work();
  return dist::all_reduce_async(tensor, op, host_group_);
}

void HostHierarchy::finish(const at::Tensor& tensor, ReduceOp op) const {
  if (!pays()) return;
  if (get_rank() == leader_) dist::all_reduce(tensor, op, leaders_group_);
  if (host_shared_) broadcast(tensor, leader_, host_broadcast_group_);
}

HostHierarchy::Reduction HostHierarchy::all_reduce_async(const at::Tensor& tensor, ReduceOp op) const {
  Reduction pending;
  Work host = start_host_reduction(tensor, op);
  if (!pays()) {
    pending.flat_ = std::move(host);
  } else {
    pending.done_ = pipeline_->push(std::move(host), tensor, op);
  }
  return pending;
}

at::Tensor HostHierarchy::all_reduce(const at::Tensor& tensor, ReduceOp op) const {
  all_reduce_async(tensor, op).wait();
  return tensor;
}

}  // namespace dist
}  // namespace kindling
