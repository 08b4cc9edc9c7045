#pragma once
/// \file
/// Hierarchical all-reduce (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE) for jobs of several
/// hosts with several ranks each: reduce inside each host (loopback or shared memory, which
/// cost no link bytes), all-reduce among one leader per host over the host links, broadcast
/// inside the host. A ring all-reduce of N ranks sends about 2(N-1)/N of the tensor out of each
/// host; among H leaders it sends 2(H-1)/H: with 2 ranks on each of 2 hosts, 1.0 instead of 1.5
/// times the tensor.
///
/// \code
///   kindling::dist::HostHierarchy hosts;            // collective: every rank, same order
///   hosts.all_reduce(t);                            // flat where the hierarchy does not pay
/// \endcode
///
/// Hosts are told apart by their host names (hostname()): ranks on one machine share its
/// loopback whatever the launcher calls its nodes.
#include <ATen/core/Tensor.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/dist/group.h"
#include "kindling/export.h"

namespace kindling {
namespace dist {

/// The world's ranks grouped by host, with the groups a hierarchical all-reduce uses.
class KINDLING_API HostHierarchy {
 public:
  /// Collective over the world: every rank calls it, in the same order (it all-gathers the
  /// host names and, when the hierarchy pays(), makes two groups per host of several ranks and
  /// one of the hosts' first ranks, with new_group). Throws what those throw. In the serial
  /// model: one host, one rank.
  HostHierarchy();

  /// Number of hosts.
  int hosts() const { return static_cast<int>(host_ranks_.size()); }
  /// The global ranks on each host, hosts in the order of their lowest rank.
  const std::vector<std::vector<int>>& host_ranks() const { return host_ranks_; }
  /// The global rank that speaks for this rank's host (its lowest rank).
  int leader() const { return leader_; }
  /// Bytes a ring all-reduce of `bytes` sends out of the busiest host, flat over all ranks
  /// (2(N-1)/N per ring edge leaving the host, once per host when ranks are host-contiguous,
  /// more when a host's ranks are interleaved with others'), 0 on one host. Local.
  double flat_link_bytes(double bytes) const;
  /// The same for the hierarchical all-reduce: 2(H-1)/H among the leaders. Local.
  double hierarchical_link_bytes(double bytes) const;
  /// Whether the hierarchical all-reduce sends fewer bytes over the host links than the flat
  /// one (several hosts, and several ranks on at least one of them). Local.
  bool pays() const;

  /// A hierarchical all-reduce in flight (all_reduce_async). Move-only; destroying one that
  /// was not waited on waits for it (errors then only logged, as dist::Work).
  class KINDLING_API Reduction {
   public:
    Reduction();
    Reduction(Reduction&&) noexcept;
    Reduction& operator=(Reduction&&) noexcept;
    ~Reduction();
    /// Blocks until the whole reduction is in the tensor. Throws what the collectives throw
    /// (kindling::TimeoutError, kindling::CommunicationError).
    void wait();

   private:
    friend class HostHierarchy;
    Work flat_;                      // the flat all-reduce, when the hierarchy does not pay
    std::shared_future<void> done_;  // the three steps, when it does
  };

  /// Starts reducing `tensor` over every rank in place and returns at once: every rank of the
  /// world calls it with a tensor of the same shape and dtype, contiguous and on device(), in
  /// the same order, from one thread at a time. When the hierarchy pays() the reduction inside
  /// the host starts here; the leaders' all-reduce and the broadcast inside the host follow on
  /// the hierarchy's own thread as soon as it completes, one tensor after the other in the order
  /// of the calls, so a DDP bucket crosses the host links while backward still computes the
  /// next. Otherwise it is one flat all-reduce. Keep `tensor` alive and untouched until waited
  /// on. Integers give exactly the flat all-reduce's result; floats may differ in the last bits
  /// (another order of additions). Throws as the collectives.
  Reduction all_reduce_async(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;
  /// all_reduce_async(tensor, op).wait(); returns `tensor`.
  at::Tensor all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;

  /// Stops the hierarchy's thread after the reductions it holds.
  ~HostHierarchy();
  HostHierarchy(const HostHierarchy&) = delete;
  HostHierarchy& operator=(const HostHierarchy&) = delete;

 private:
  // Step 1 (inside the host; the whole flat all-reduce when the hierarchy does not pay), and
  // steps 2 and 3 (the leaders' all-reduce, the broadcast), on the hierarchy's thread.
  Work start_host_reduction(const at::Tensor& tensor, ReduceOp op) const;
  void finish(const at::Tensor& tensor, ReduceOp op) const;

  std::vector<std::vector<int>> host_ranks_;
  std::vector<int> host_of_rank_;
  int leader_ = 0;
  Group host_group_;     // this rank's host (valid when it has several ranks)
  Group leaders_group_;  // the hosts' first ranks (valid with several hosts)
  // The host's ranks again, for the broadcasts: the hierarchy's thread issues them while the
  // caller's thread issues the next in-host reductions, and one group's collectives must come
  // from one thread in one order.
  Group host_broadcast_group_;
  class Pipeline;
  std::unique_ptr<Pipeline> pipeline_;  // the thread of the second and third steps
  bool host_shared_ = false;
  bool several_hosts_ = false;
};

}  // namespace dist
}  // namespace kindling
