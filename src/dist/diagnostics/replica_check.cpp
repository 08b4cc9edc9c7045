// check_replicas (kindling/dist/replica_check.h): one all_gather of every rank's fingerprints,
// then the same verdict computed from the same gathered values on every rank.
#include "kindling/dist/replica_check.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "kindling/dist/dist.h"

namespace kindling {
namespace dist {

namespace {

constexpr char kReplicaWho[] = "kindling::dist::check_replicas";
constexpr std::size_t kReplicaNamesShown = 5;  // tensors named per rank in a message; the rest counted

// A tensor's bytes as integers of its element's width (32-bit words for 8- and 16-byte elements),
// flat. One-byte bool is read as bytes (view() refuses bool).
at::Tensor replica_words(const at::Tensor& tensor) {
  at::Tensor flat = tensor.detach().contiguous().reshape({-1});
  if (flat.scalar_type() == at::kBool) flat = flat.view(at::kByte);
  switch (flat.element_size()) {
    case 1: return flat.view(at::kChar);
    case 2: return flat.view(at::kShort);
    default: return flat.view(at::kInt);
  }
}

// The exact sum of a CPU tensor's words (replica_words) in 64 bits: fewer than 2^32 words of at
// most 32 bits cannot overflow it. A plain loop the compiler vectorizes: ATen's sum(kLong) of
// int32 first converts the whole tensor to int64 (a ResNet-18's parameters: 56 ms against 3 ms
// here, on one thread).
template <typename Word>
int64_t replica_word_sum(const at::Tensor& words) {
  const Word* p = words.data_ptr<Word>();
  int64_t sum = 0;
  for (int64_t i = 0, n = words.numel(); i < n; ++i) sum += p[i];
  return sum;
}

at::Tensor replica_sum(const at::Tensor& words) {
  if (!words.is_cpu()) return words.sum(at::kLong);  // a device's reduction reads the words once
  switch (words.scalar_type()) {
    case at::kChar: return at::scalar_tensor(replica_word_sum<int8_t>(words), at::kLong);
    case at::kShort: return at::scalar_tensor(replica_word_sum<int16_t>(words), at::kLong);
    default: return at::scalar_tensor(replica_word_sum<int32_t>(words), at::kLong);
  }
}

std::string replica_rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (const int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return (ranks.size() == 1 ? "rank " : "ranks ") + out;
}

// The names of `indices` in quotes, the first kReplicaNamesShown of them, then how many more.
std::string replica_name_list(const std::vector<std::string>& names, const std::vector<std::size_t>& indices) {
  std::string out;
  for (std::size_t k = 0; k < indices.size() && k < kReplicaNamesShown; ++k)
    out += (k == 0 ? "'" : ", '") + names[indices[k]] + "'";
  if (indices.size() > kReplicaNamesShown)
    out += " and " + std::to_string(indices.size() - kReplicaNamesShown) + " more";
  return out;
}

// What the gathered fingerprints say: the rows (one per member) grouped by equal value.
struct ReplicaVerdict {
  std::vector<int> diverged, majority;  // global ranks
  std::vector<std::size_t> differing;   // tensor indices where some members differ
  std::vector<int64_t> reference;       // the majority's row (empty without a majority)
  bool has_majority() const { return !majority.empty(); }
};

ReplicaVerdict judge_replicas(const std::vector<std::vector<int64_t>>& rows, const std::vector<int>& ranks) {
  std::map<std::vector<int64_t>, std::vector<int>> holders;
  for (std::size_t m = 0; m < rows.size(); ++m) holders[rows[m]].push_back(ranks[m]);
  ReplicaVerdict v;
  for (const auto& [row, who] : holders) {
    if (2 * who.size() > rows.size()) {
      v.majority = who;
      v.reference = row;
    }
  }
  for (std::size_t m = 0; m < rows.size(); ++m)
    if (!v.has_majority() || rows[m] != v.reference) v.diverged.push_back(ranks[m]);
  for (std::size_t t = 0; !rows.empty() && t < rows[0].size(); ++t)
    if (std::any_of(rows.begin(), rows.end(), [&](const auto& row) { return row[t] != rows[0][t]; }))
      v.differing.push_back(t);
  return v;
}

// The message every member throws, with a majority: each diverged rank with the tensors where it
// differs from the majority. The same text on every rank (from the same gathered values).
std::string describe_replica_minority(const ReplicaVerdict& v, const std::vector<std::vector<int64_t>>& rows,
                                      const std::vector<int>& ranks, const std::vector<std::string>& names) {
  std::ostringstream m;
  m << replica_rank_list(v.diverged) << (v.diverged.size() == 1 ? " diverged" : " diverged each")
    << " from the majority (" << replica_rank_list(v.majority) << " of " << rows.size() << ")";
  for (std::size_t member = 0; member < rows.size(); ++member) {
    if (rows[member] == v.reference) continue;
    std::vector<std::size_t> own;
    for (std::size_t t = 0; t < names.size(); ++t)
      if (rows[member][t] != v.reference[t]) own.push_back(t);
    m << "; rank " << ranks[member] << " differs in " << own.size() << " of " << names.size()
      << " tensors: " << replica_name_list(names, own) << " (fingerprint " << rows[member][own[0]]
      << ", the majority's " << v.reference[own[0]] << ")";
  }
  m << ". Data-parallel replicas are equal bit for bit after every step; one that is not was corrupted (its "
       "memory or device flipped a bit) or updated differently (a step skipped, other optimizer settings). Stop "
       "trusting the host of "
    << replica_rank_list(v.diverged)
    << ": resume from the last checkpoint without it, or train under kindling-run --live_recovery with "
       "kindling::handlers::LiveRecovery, which drops a diverged rank's host and goes on with the others";
  return m.str();
}

// The message without a majority (2 ranks that disagree, a tie): every rank is named.
std::string describe_replica_no_majority(const ReplicaVerdict& v, const std::vector<std::vector<int64_t>>& rows,
                                         const std::vector<int>& ranks, const std::vector<std::string>& names) {
  std::ostringstream m;
  const std::size_t first = v.differing.empty() ? 0 : v.differing[0];
  m << "no replica is held by a majority of the " << rows.size() << " ranks, so which is right cannot be told; "
    << v.differing.size() << " of " << names.size() << " tensors differ: " << replica_name_list(names, v.differing)
    << " (the first's fingerprints:";
  std::map<int64_t, std::vector<int>> by_value;
  for (std::size_t member = 0; member < rows.size(); ++member) by_value[rows[member][first]].push_back(ranks[member]);
  for (const auto& [value, who] : by_value) m << " " << replica_rank_list(who) << " " << value << ";";
  m << " every rank is named: " << replica_rank_list(v.diverged)
    << "). Data-parallel replicas are equal bit for bit after every step; these were corrupted (memory or a "
       "device flipped a bit) or updated differently (a step skipped, other optimizer settings). The job stops: "
       "resume from the last checkpoint, on 3 ranks or more if you can (a majority then names the diverged "
       "one), and check the hosts' memory and devices";
  return m.str();
}

}  // namespace

bool ReplicaDivergedError::diverged(int rank) const {
  return std::find(diverged_.begin(), diverged_.end(), rank) != diverged_.end();
}

at::Tensor replica_fingerprints(const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return at::zeros({0}, at::kLong);
  const c10::Device device = tensors.front().device();
  std::vector<at::Tensor> sums;
  sums.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    // Summed as int64 (exact: fewer than 2^32 words of at most 32 bits); an empty tensor sums to 0.
    sums.push_back(replica_sum(replica_words(t)).to(device));
  }
  return at::stack(sums);
}

void check_replicas(const NamedTensors& tensors, const ReplicaCheckOptions& options) {
  const Group& group = options.group();
  if (!group.is_member()) return;
  std::vector<at::Tensor> values;
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    names.push_back(name);
    values.push_back(tensor);
  }
  const auto n = static_cast<int64_t>(values.size());
  const at::Tensor gathered = all_gather(replica_fingerprints(values), group).to(at::kCPU).contiguous();
  const std::vector<int> ranks = group.ranks();
  const auto members = static_cast<int64_t>(ranks.size());
  KINDLING_INTERNAL_ASSERT(gathered.numel() == n * members, kReplicaWho, ": gathered ", gathered.numel(),
                           " values for ", members, " ranks of ", n, " tensors");
  std::vector<std::vector<int64_t>> rows;
  const int64_t* data = gathered.data_ptr<int64_t>();
  for (int64_t m = 0; m < members; ++m) rows.emplace_back(data + m * n, data + (m + 1) * n);
  const ReplicaVerdict v = judge_replicas(rows, ranks);
  if (v.diverged.empty()) return;
  std::vector<std::string> differing;
  for (const std::size_t t : v.differing) differing.push_back(names[t]);
  const std::string what = std::string(kReplicaWho) + ": the data-parallel replicas differ" +
                           (options.context().empty() ? "" : " " + options.context()) + ": " +
                           (v.has_majority() ? describe_replica_minority(v, rows, ranks, names)
                                             : describe_replica_no_majority(v, rows, ranks, names));
  throw ReplicaDivergedError(::kindling::detail::rank_prefix() + what, v.diverged, v.majority, differing);
}

void check_replicas(const torch::nn::Module& module, const ReplicaCheckOptions& options) {
  NamedTensors named;
  for (const auto& p : module.named_parameters()) named.emplace_back(p.key(), p.value());
  if (options.buffers())
    for (const auto& b : module.named_buffers()) named.emplace_back(b.key(), b.value());
  check_replicas(named, options);
}

}  // namespace dist
}  // namespace kindling
