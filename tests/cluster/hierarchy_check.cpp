// One rank of the hierarchical all-reduce case of tests/cluster/cluster_test.py, started by
// kindling-run on every host. It checks that kindling::dist::HostHierarchy's all-reduce gives
// the flat all-reduce's results (bitwise for integers, float tolerance otherwise), then runs a
// flat and a hierarchical phase of all-reduces between printed markers, pausing around each,
// so that the harness can read every host's interface counters while nothing is sent.
//
//   hierarchy_check [--megabytes 4] [--repeats 5]
//
// Rank 0 prints "LAYOUT hosts=H pays=0|1 flat_link_bytes=B hierarchical_link_bytes=B" (the
// predictions per all-reduce of float32; bf16_element_bytes: what one bfloat16 element should
// cost on gloo's wire, 2 where this LibTorch's gloo sums bfloat16, 4 where kindling widens it),
// "DDP_HOOK <auto> <flat>" (the hooks DDP chose by itself and with
// hierarchical_allreduce(false); their gradients must agree), "PHASE flat|hierarchical|bf16
// START|END" (bf16: flat all-reduces of the same number of bfloat16 elements) and "CORRECT"
// on success;
// any rank exits 1 with the difference it found.
#include <ATen/ATen.h>

#include <kindling/dist/dist.h>
#include <kindling/dist/auto.h>
#include <kindling/dist/hierarchy.h>
#include <kindling/nn/ddp.h>
#include <torch/nn/modules/linear.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace kd = kindling::dist;

namespace {

// Every rank pauses so that the harness reads the counters while the links are quiet.
void marker(const std::string& text) {
  kd::barrier();
  if (kd::get_rank() == 0) std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  kd::barrier();
}

bool same_results(const kd::HostHierarchy& hosts) {
  const int rank = kd::get_rank();
  for (auto op : {kd::ReduceOp::kSum, kd::ReduceOp::kMax, kd::ReduceOp::kMin}) {
    at::Tensor ints = at::arange(100003, at::kLong) * (rank + 1) + (int64_t{1} << 40) * rank;
    at::Tensor flat = kd::all_reduce(ints.clone(), op), tiered = hosts.all_reduce(ints.clone(), op);
    if (!at::equal(flat, tiered)) {
      std::cerr << "rank " << rank << ": integer results differ: " << (flat - tiered).abs().max() << "\n";
      return false;
    }
  }
  at::manual_seed(rank);
  at::Tensor floats = at::randn({100003});
  at::Tensor flat = kd::all_reduce(floats.clone()), tiered = hosts.all_reduce(floats.clone());
  // Another order of additions: a few ulps of the sum's magnitude.
  if (!at::allclose(flat, tiered, 1e-5, 1e-5)) {
    std::cerr << "rank " << rank << ": float results differ by " << (flat - tiered).abs().max() << "\n";
    return false;
  }
  // Several reductions in flight at once (as DDP's buckets), waited on in reverse order: each
  // equals its flat all-reduce.
  std::vector<at::Tensor> inputs, outputs;
  std::vector<kd::HostHierarchy::Reduction> pending;
  for (int64_t i = 0; i < 6; ++i) {
    inputs.push_back(at::arange(1000 * (i + 1), at::kLong) * (rank + 1) + i);
    outputs.push_back(inputs.back().clone());
    pending.push_back(hosts.all_reduce_async(outputs.back()));
  }
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) it->wait();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!at::equal(kd::all_reduce(inputs[i].clone()), outputs[i])) {
      std::cerr << "rank " << rank << ": reduction " << i << " of 6 in flight differs from the flat all-reduce\n";
      return false;
    }
  }
  return true;
}

// DDP picks the hierarchical all-reduce by itself here, and its gradients equal those of a
// flat DDP model (float tolerance).
bool ddp_picks_it() {
  const int rank = kd::get_rank();
  at::manual_seed(5);
  auto tiered = kd::auto_model(torch::nn::Linear(64, 32));
  at::manual_seed(5);
  auto flat = kd::auto_model(torch::nn::Linear(64, 32), kindling::nn::DdpOptions().hierarchical_allreduce(false));
  if (rank == 0)
    std::printf("DDP_HOOK %s %s\n", tiered.reducer()->comm_hook_name().c_str(),
                flat.reducer()->comm_hook_name().c_str());
  at::manual_seed(100 + rank);
  const at::Tensor x = at::randn({16, 64});
  tiered(x).pow(2).sum().backward();
  flat(x).pow(2).sum().backward();
  for (const auto& item : tiered->named_parameters()) {
    const auto& a = item.value().grad();
    const auto& b = flat->named_parameters()[item.key()].grad();
    if (!at::allclose(a, b, 1e-5, 1e-6)) {
      std::cerr << "rank " << rank << ": DDP gradients of " << item.key() << " differ by " << (a - b).abs().max()
                << "\n";
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  double megabytes = 4;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--megabytes") megabytes = std::stod(argv[i + 1]);
    if (flag == "--repeats") repeats = std::stoi(argv[i + 1]);
  }
  try {
    kd::initialize("gloo");
    kd::HostHierarchy hosts;
    const int64_t count = static_cast<int64_t>(megabytes * (1 << 20) / 4);
    const double bytes = 4.0 * count;
    if (kd::get_rank() == 0) {
#ifdef KINDLING_GLOO_REDUCES_BF16
      const int bf16_bytes = 2;
#else
      const int bf16_bytes = 4;
#endif
      std::printf("LAYOUT hosts=%d pays=%d flat_link_bytes=%.0f hierarchical_link_bytes=%.0f bf16_element_bytes=%d\n",
                  hosts.hosts(), hosts.pays() ? 1 : 0, hosts.flat_link_bytes(bytes),
                  hosts.hierarchical_link_bytes(bytes), bf16_bytes);
    }
    if (!same_results(hosts) || !ddp_picks_it()) return 1;
    at::Tensor t = at::ones({count});
    marker("PHASE flat START");
    for (int i = 0; i < repeats; ++i) kd::all_reduce(t);
    marker("PHASE flat END");
    marker("PHASE hierarchical START");
    for (int i = 0; i < repeats; ++i) hosts.all_reduce(t);
    marker("PHASE hierarchical END");
    at::Tensor half = at::ones({count}, at::kBFloat16);
    marker("PHASE bf16 START");
    for (int i = 0; i < repeats; ++i) kd::all_reduce(half);
    marker("PHASE bf16 END");
    if (kd::get_rank() == 0) std::printf("CORRECT\n");
    std::fflush(stdout);
    kd::finalize();
  } catch (const std::exception& e) {
    std::cerr << "hierarchy_check: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
