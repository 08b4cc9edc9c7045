// group-allreduce: a collective on a subset of the ranks.
#include <torch/torch.h>

#include <kindling/kindling.h>

#include "tutorial.h"

namespace kd = kindling::dist;

namespace dist_tutorial {

void run_group_all_reduce() {
  const int rank = kd::get_rank();
  section("group-allreduce: all_reduce(SUM) over the group {0, 1}");
  // Every rank of the world creates the group, members or not, in the same order.
  const kd::Group group = kd::new_group({0, 1});
  torch::Tensor tensor = torch::ones({1}, torch::TensorOptions().device(kd::device()));
  kd::all_reduce(tensor, kd::ReduceOp::kSum, group);  // in place; non-members keep theirs
  const float value = tensor[0].item<float>();
  if (!group.is_member()) {
    say("Rank ", rank, " is not in the group and keeps ", value);
    return;
  }
  say("Rank ", rank, " has data ", value);
  KINDLING_CHECK_T(kindling::Error, value == static_cast<float>(group.size()), "dist_tutorial group-allreduce: rank ",
                   rank, " got ", value, " instead of ", group.size());
}

}  // namespace dist_tutorial
