// Hierarchical all-reduce over the hosts of a job (kindling/dist/hierarchy.h).
#include "kindling/dist/hierarchy.h"

#include <algorithm>
#include <map>

namespace kindling {
namespace dist {

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
  host_shared_ = mine.size() > 1;
  leaders_group_ = new_group(leaders);
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
  if (!pays()) return all_reduce_async(tensor, op);  // the whole reduction, flat
  if (!host_shared_) return Work();
  return all_reduce_async(tensor, op, host_group_);
}

void HostHierarchy::finish(const at::Tensor& tensor, ReduceOp op) const {
  if (!pays()) return;
  if (get_rank() == leader_) dist::all_reduce(tensor, op, leaders_group_);
  if (host_shared_) broadcast(tensor, leader_, host_group_);
}

at::Tensor HostHierarchy::all_reduce(const at::Tensor& tensor, ReduceOp op) const {
  Work host = start_host_reduction(tensor, op);
  if (host.valid()) host.wait();
  finish(tensor, op);
  return tensor;
}

}  // namespace dist
}  // namespace kindling
