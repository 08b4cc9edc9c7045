#pragma once
// What DistributedDataParallel's reducer (src/nn/ddp/ddp_state.h) learns from its first synchronised
// backward: the order in which this rank saw gradients become ready (for the buckets' rebuild,
// src/nn/ddp/ddp_rebuild.cpp), and with static_graph the graph itself: the parameters this rank
// leaves without a gradient and which ones some rank used. Then, in each backward, the first
// sign that a static graph changed.
//
// Invariants: ready_order_ is empty once rebuilt() (nothing is recorded after); locally_unused_
// has one entry per parameter and global_used_ is what the first backward learned once
// graph_known(). Not thread-safe: the reducer calls it under its lock.
#include <ATen/ATen.h>

#include <cstddef>
#include <string>
#include <vector>

namespace kindling {
namespace nn {
namespace detail {

class Rebuild {
 public:
  // Whether the buckets are past their rebuild (done, or not to be done).
  bool rebuilt() const { return rebuilt_; }
  // static_graph: whether the first synchronised backward's graph is known.
  bool graph_known() const { return graph_known_; }

  // Parameter i's gradient became ready (recorded until the rebuild).
  void saw_ready(std::size_t i) {
    if (!rebuilt_) ready_order_.push_back(i);
  }
  // Parameter `name` was ready before its gradient came: with a known graph, the graph changed
  // (the first such parameter of the backward is kept).
  void saw_early(const std::string& name) {
    if (graph_known_ && graph_change_.empty()) graph_change_ = name;
  }
  // This backward's first sign of a changed graph: a parameter's name, or empty.
  const std::string& graph_change() const { return graph_change_; }

  // This rank's order for the rebuild: the parameters it saw become ready, then those it did
  // not see in reverse registration order (`n` parameters in all).
  std::vector<int64_t> local_order(std::size_t n) const {
    std::vector<char> seen(n, 0);
    std::vector<int64_t> order;
    for (std::size_t i : ready_order_) {
      seen[i] = 1;
      order.push_back(static_cast<int64_t>(i));
    }
    for (std::size_t k = n; k-- > 0;) {
      if (!seen[k]) order.push_back(static_cast<int64_t>(k));
    }
    return order;
  }
  // The rebuild is done (or skipped for good): nothing more is recorded.
  void finish() {
    rebuilt_ = true;
    ready_order_.clear();
  }
  // Join: every rank must agree on the buckets and a rank may join before its first backward,
  // so the buckets stay as they are.
  void freeze() { rebuilt_ = true; }

  // static_graph, after the first synchronised backward: the parameters this rank left without
  // a gradient (`missing`, of `n`) and which ones some rank used (`used`).
  void learn_graph(std::size_t n, const std::vector<std::size_t>& missing, const at::Tensor& used) {
    locally_unused_.assign(n, 0);
    for (std::size_t i : missing) locally_unused_[i] = 1;
    global_used_ = used;
    graph_known_ = true;
  }
  // With graph_known(): whether this rank's graph leaves parameter i without a gradient.
  bool locally_unused(std::size_t i) const { return locally_unused_[i] != 0; }
  // With graph_known(): which parameters some rank used (1) or none (0).
  const at::Tensor& global_used() const { return global_used_; }

  // As a backward ends: no sign of change yet, and a first backward that failed records anew.
  void reset() {
    graph_change_.clear();
    if (!rebuilt_) ready_order_.clear();
  }

 private:
  std::vector<std::size_t> ready_order_;
  bool rebuilt_ = false;
  bool graph_known_ = false;
  std::vector<char> locally_unused_;
  at::Tensor global_used_;
  std::string graph_change_;
};

}  // namespace detail
}  // namespace nn
}  // namespace kindling
