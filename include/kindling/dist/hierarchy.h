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
///   if (hosts.pays()) hosts.all_reduce(t);          // else kindling::dist::all_reduce(t)
/// \endcode
///
/// Hosts are told apart by their host names (hostname()): ranks on one machine share its
/// loopback whatever the launcher calls its nodes.
#include <ATen/core/Tensor.h>

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
  /// host names and, when the hierarchy pays(), makes a group per host of several ranks and
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

  /// Reduces `tensor` over every rank in place, in three steps when the hierarchy pays()
  /// (see the file comment; else one flat all-reduce), and returns it: every rank of the world
  /// calls it with a tensor of the same shape and dtype, contiguous and on device(). Integers
  /// give exactly the flat all-reduce's result; floats may differ in the last bits (another
  /// order of additions). Throws as the collectives.
  at::Tensor all_reduce(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;
  /// all_reduce in two parts, for DDP's hook, which overlaps the first with backward. This
  /// one starts the reduction inside this rank's host (or the whole flat all-reduce when the
  /// hierarchy does not pay) and returns its Work; it is invalid (Work::valid() false, not to
  /// be waited on) on a host of one rank. Every rank calls it in the same order.
  Work start_host_reduction(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;
  /// The second part, after the first's Work was waited on: the leaders' all-reduce, then
  /// the broadcast inside each host (nothing when the hierarchy does not pay).
  void finish(const at::Tensor& tensor, ReduceOp op = ReduceOp::kSum) const;

 private:
  std::vector<std::vector<int>> host_ranks_;
  std::vector<int> host_of_rank_;
  int leader_ = 0;
  Group host_group_;     // this rank's host (valid when it has several ranks)
  Group leaders_group_;  // the hosts' first ranks (valid with several hosts)
  bool host_shared_ = false;
  bool several_hosts_ = false;
};

}  // namespace dist
}  // namespace kindling
