// PowerSGD as a communication hook (kindling/nn/powersgd.h). The steps, their order and the
// random draws follow torch's powerSGD_hook so that both give the same gradients.
#include "kindling/nn/powersgd.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace nn {

namespace {

constexpr const char* kWho = "kindling::nn::powerSGD_hook";

// numpy's RandomState(seed).randint(1_000_000_000), which torch draws each Q's seed from: the
// same Mersenne Twister, its 32-bit outputs masked to 30 bits and drawn again above the bound.
// Hand-written because no package gives numpy's legacy bounded draw in C++.
int64_t numpy_randint_1e9(std::mt19937& rng) {
  uint32_t v;
  do {
    v = static_cast<uint32_t>(rng()) & 0x3FFFFFFFu;
  } while (v > 999999999u);
  return v;
}

// Orthonormal columns of each [batch, n, r] matrix in place: modified Gram-Schmidt for r <= 2
// and half-precision types, QR otherwise (torch's _orthogonalize; epsilon only for the first).
void orthogonalize(at::Tensor matrices, double epsilon) {
  const int64_t cols = matrices.size(2);
  const auto dtype = matrices.scalar_type();
  if (cols > 2 && dtype != at::kHalf && dtype != at::kBFloat16) {
    matrices.copy_(std::get<0>(at::linalg_qr(matrices)));
    return;
  }
  for (int64_t i = 0; i < cols; ++i) {
    at::Tensor col = matrices.narrow(2, i, 1);
    at::Tensor norm = at::linalg_vector_norm(col, 2, {1}, /*keepdim=*/true);
    col.div_(epsilon == 0 ? norm : norm + epsilon);
    if (i + 1 < cols) {
      at::Tensor rest = matrices.narrow(2, i + 1, cols - i - 1);
      rest.sub_(at::sum(col * rest, {1}, /*keepdim=*/true) * col);
    }
  }
}

// A bucket's gradients sorted into those approximated (as [1, n, m] views of the bucket) and
// those averaged whole (flat views).
struct Split {
  std::vector<at::Tensor> matrices;
  std::vector<int64_t> ranks;
  std::vector<at::Tensor> whole;
  int64_t p_numel = 0, q_numel = 0, numel_after = 0;
};

Split split(const GradBucket& bucket, const PowerSgdOptions& o) {
  Split s;
  for (const auto& g : bucket.gradients) {
    const int64_t n = g.dim() == 0 ? 1 : g.size(0);
    const int64_t m = n == 0 ? 0 : g.numel() / n;
    const int64_t r = std::min({n, m, o.matrix_approximation_rank()});
    if (static_cast<double>((n + m) * r) * o.min_compression_rate() < static_cast<double>(n * m)) {
      s.matrices.push_back(g.view({1, n, m}));
      s.ranks.push_back(r);
      s.p_numel += n * r;
      s.q_numel += m * r;
      s.numel_after += (n + m) * r;
    } else {
      s.whole.push_back(g.view({-1}));
      s.numel_after += n * m;
    }
  }
  return s;
}

}  // namespace

struct detail::PowerSgdState {
  PowerSgdOptions o;
  std::mt19937 rng;
  std::map<int64_t, at::Tensor> error, p_memory, q_memory;
  std::map<int64_t, int64_t> bucket_numel;  // to catch one hook serving two models
  int64_t iter = 0, numel_before = 0, numel_after = 0;
  int world = 0;
  bool group_checked = false;
};

namespace {

// One compressed bucket between run() and wait(): the uncompressed part's and P's
// all-reduces are in flight; Q's happens in wait().
class PowerSgdBucket : public PendingBucket {
 public:
  PowerSgdBucket(std::shared_ptr<detail::PowerSgdState> state, int64_t index, int world, dist::Group group,
                 at::Tensor buffer, at::Tensor before, Split split, at::Tensor whole, dist::Work whole_work,
                 dist::Work p_work)
      : state_(std::move(state)),
        index_(index),
        world_(world),
        group_(std::move(group)),
        buffer_(std::move(buffer)),
        before_(std::move(before)),
        split_(std::move(split)),
        whole_(std::move(whole)),
        whole_work_(std::move(whole_work)),
        p_work_(std::move(p_work)) {}

  void wait() override {
    at::NoGradGuard no_grad;
    auto& s = *state_;
    if (whole_.defined()) {
      whole_work_.wait();
      whole_.div_(world_);
      int64_t offset = 0;
      for (auto& t : split_.whole) {
        t.copy_(whole_.narrow(0, offset, t.numel()));
        offset += t.numel();
      }
    }
    if (!split_.matrices.empty()) {
      p_work_.wait();
      auto ps = views(s.p_memory.at(index_), 1), qs = views(s.q_memory.at(index_), 2);
      for (std::size_t k = 0; k < ps.size(); ++k) {
        orthogonalize(ps[k], s.o.orthogonalization_epsilon());
        at::bmm_out(qs[k], split_.matrices[k].transpose(1, 2), ps[k]);
      }
      at::Tensor q = s.q_memory.at(index_);
      dist::all_reduce_async(q, dist::ReduceOp::kSum, group_).wait();
      q.div_(world_);
      for (std::size_t k = 0; k < ps.size(); ++k) at::bmm_out(split_.matrices[k], ps[k], qs[k].transpose(1, 2));
    }
    if (s.o.use_error_feedback()) s.error[index_] = before_ - buffer_;
    if (!s.o.warm_start()) {
      s.p_memory.erase(index_);
      s.q_memory.erase(index_);
    }
  }

 private:
  // The [1, n, r] (dim 1) or [1, m, r] (dim 2) pieces of a P or Q memory, one per matrix.
  std::vector<at::Tensor> views(const at::Tensor& memory, int dim) const {
    std::vector<at::Tensor> out;
    int64_t offset = 0;
    for (std::size_t k = 0; k < split_.matrices.size(); ++k) {
      const int64_t rows = split_.matrices[k].size(dim), r = split_.ranks[k];
      out.push_back(memory.narrow(0, offset, rows * r).view({1, rows, r}));
      offset += rows * r;
    }
    return out;
  }

  std::shared_ptr<detail::PowerSgdState> state_;
  int64_t index_;
  int world_;
  dist::Group group_;
  at::Tensor buffer_, before_;
  Split split_;
  at::Tensor whole_;
  dist::Work whole_work_, p_work_;
};

// The plain all-reduce of the iterations before start_powerSGD_iter.
class AveragedBucket : public PendingBucket {
 public:
  explicit AveragedBucket(dist::Work work) : work_(std::move(work)) {}
  void wait() override { work_.wait(); }

 private:
  dist::Work work_;
};

// With error feedback: adds bucket `index`'s error memory to `buffer` (making a zero one the
// first time) and returns a copy of the result; without: an undefined tensor.
at::Tensor add_error_feedback(detail::PowerSgdState& s, int64_t index, at::Tensor& buffer) {
  at::Tensor before;
  if (s.o.use_error_feedback()) {
    auto e = s.error.find(index);
    if (e != s.error.end()) {
      KINDLING_CHECK(e->second.numel() == buffer.numel(), kWho, ": the error-feedback memory of bucket ", index,
                     " has ", e->second.numel(), " elements but the bucket ", buffer.numel(),
                     " (a checkpoint of another model?)");
      e->second = e->second.to(buffer.device());
      buffer.add_(e->second);
    } else {
      s.error[index] = at::zeros_like(buffer);
    }
    before = buffer.clone();
  }
  return before;
}

// P = M Q for each approximated matrix M of bucket `index`, into its P memory, with Q drawn
// afresh (or, warm-started, the last one) and orthogonalised, in its Q memory.
void compute_p(detail::PowerSgdState& s, int64_t index, const Split& parts, const at::Tensor& buffer) {
  const bool draw = !s.o.warm_start() || s.q_memory.count(index) == 0;
  if (draw) {
    s.q_memory[index] = at::empty({parts.q_numel}, buffer.options());
  } else {  // warm start; after load_state_dict the memory is on the CPU
    KINDLING_CHECK(s.q_memory[index].numel() == parts.q_numel, kWho, ": the warm-start Q of bucket ", index, " has ",
                   s.q_memory[index].numel(), " elements but the bucket needs ", parts.q_numel,
                   " (a checkpoint of another model or rank?)");
    s.q_memory[index] = s.q_memory[index].to(buffer.device());
  }
  if (s.p_memory.count(index) == 0) s.p_memory[index] = at::empty({parts.p_numel}, buffer.options());
  std::vector<at::Tensor> ps, qs;
  int64_t p_offset = 0, q_offset = 0;
  for (std::size_t k = 0; k < parts.matrices.size(); ++k) {
    const int64_t n = parts.matrices[k].size(1), m = parts.matrices[k].size(2), r = parts.ranks[k];
    ps.push_back(s.p_memory[index].narrow(0, p_offset, n * r).view({1, n, r}));
    qs.push_back(s.q_memory[index].narrow(0, q_offset, m * r).view({1, m, r}));
    p_offset += n * r;
    q_offset += m * r;
  }
  if (draw) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(numpy_randint_1e9(s.rng)));
    for (auto& q : qs) {
      q.copy_(at::randn(q.sizes(), generator, at::TensorOptions().dtype(buffer.scalar_type())));
      orthogonalize(q, s.o.orthogonalization_epsilon());
    }
  } else {
    for (auto& q : qs) orthogonalize(q, s.o.orthogonalization_epsilon());
  }
  for (std::size_t k = 0; k < ps.size(); ++k) at::bmm_out(ps[k], parts.matrices[k], qs[k]);
}

}  // namespace

PowerSgdHook::PowerSgdHook(PowerSgdOptions options) : impl_(std::make_shared<detail::PowerSgdState>()) {
  KINDLING_CHECK(options.matrix_approximation_rank() >= 1, kWho, ": matrix_approximation_rank must be at least 1, got ",
                 options.matrix_approximation_rank());
  KINDLING_CHECK(options.start_powerSGD_iter() >= 0, kWho, ": start_powerSGD_iter must be >= 0, got ",
                 options.start_powerSGD_iter());
  KINDLING_CHECK(options.min_compression_rate() >= 0, kWho, ": min_compression_rate must be >= 0, got ",
                 options.min_compression_rate());
  KINDLING_CHECK(options.orthogonalization_epsilon() >= 0, kWho, ": orthogonalization_epsilon must be >= 0, got ",
                 options.orthogonalization_epsilon());
  impl_->rng.seed(options.random_seed());
  impl_->o = std::move(options);
}

PowerSgdHook::~PowerSgdHook() = default;

std::string PowerSgdHook::name() const { return "powerSGD"; }
const PowerSgdOptions& PowerSgdHook::options() const { return impl_->o; }
int64_t PowerSgdHook::iteration() const { return impl_->iter; }

PowerSgdHook::Stats PowerSgdHook::compression_stats() const {
  Stats st;
  st.numel_before = impl_->numel_before;
  st.numel_after = impl_->numel_after;
  st.rate = st.numel_after > 0 ? static_cast<double>(st.numel_before) / static_cast<double>(st.numel_after) : 0;
  return st;
}

std::unique_ptr<PendingBucket> PowerSgdHook::run(GradBucket& bucket, const dist::Group& group) {
  at::NoGradGuard no_grad;
  auto& s = *impl_;
  if (!s.group_checked) {  // once: the model's group does not change
    const std::vector<int> ranks = group.ranks();
    KINDLING_CHECK(ranks == s.o.group().ranks(), kWho, ": the DDP model reduces over ranks ",
                   c10::IntArrayRef(std::vector<int64_t>(ranks.begin(), ranks.end())),
                   " but the hook was made for the group of PowerSgdOptions::group() (", s.o.group().size(),
                   " ranks); pass the model's group to PowerSgdOptions().group(...)");
    s.group_checked = true;
  }
  const int64_t index = bucket.index;
  const auto known = s.bucket_numel.emplace(index, bucket.buffer.numel());
  KINDLING_CHECK(known.first->second == bucket.buffer.numel(), kWho, ": bucket ", index, " has ", bucket.buffer.numel(),
                 " elements, but ", known.first->second,
                 " when the hook last saw it; one PowerSGD hook serves one model: make a hook per model");
  s.world = group.size();
  at::Tensor buffer = bucket.buffer;
  const bool compress = s.iter >= s.o.start_powerSGD_iter();
  if (bucket.is_last) ++s.iter;
  if (!compress) {
    buffer.div_(s.world);
    return std::make_unique<AveragedBucket>(dist::all_reduce_async(buffer, dist::ReduceOp::kSum, group));
  }
  at::Tensor before = add_error_feedback(s, index, buffer);
  Split parts = split(bucket, s.o);
  s.numel_before += buffer.numel();
  s.numel_after += parts.numel_after;
  compute_p(s, index, parts, buffer);

  at::Tensor whole;
  dist::Work whole_work, p_work;
  if (!parts.whole.empty()) {
    whole = at::cat(parts.whole);
    whole_work = dist::all_reduce_async(whole, dist::ReduceOp::kSum, group);
  }
  if (!parts.matrices.empty()) p_work = dist::all_reduce_async(s.p_memory[index], dist::ReduceOp::kSum, group);
  return std::make_unique<PowerSgdBucket>(impl_, index, s.world, group, buffer, before, std::move(parts), whole,
                                          std::move(whole_work), std::move(p_work));
}

namespace {

// The saved value under `key`, which must hold `kind` (a check, then the value).
c10::IValue entry(const StateDict& state, const std::string& key, bool (c10::IValue::*is)() const, const char* kind) {
  KINDLING_CHECK(state.contains(key), kWho, ": the checkpoint's PowerSGD state has no key '", key,
                 "' (was it saved from another hook?)");
  c10::IValue v = state.at(key);
  KINDLING_CHECK((v.*is)(), kWho, ": key '", key, "' holds a ", v.tagKind(), ", expected ", kind);
  return v;
}

// Bucket index -> tensor, as a dict with string keys (what torch.load reads as a dict).
StateDict save_buckets(const std::map<int64_t, at::Tensor>& tensors) {
  StateDict out = new_state_dict();
  for (const auto& [index, t] : tensors) out.insert(std::to_string(index), t.cpu());
  return out;
}

std::map<int64_t, at::Tensor> load_buckets(const c10::IValue& saved, const std::string& key) {
  std::map<int64_t, at::Tensor> out;
  for (const auto& kv : saved.toGenericDict()) {
    const std::string index = kv.key().toStringRef();
    KINDLING_CHECK(
        kv.value().isTensor() && !index.empty() && index.find_first_not_of("0123456789") == std::string::npos, kWho,
        ": '", key, "' must map bucket indices to tensors; entry '", index, "' holds a ", kv.value().tagKind());
    out[std::stoll(index)] = kv.value().toTensor();
  }
  return out;
}

}  // namespace

StateDict PowerSgdHook::state_dict() const {
  const auto& s = *impl_;
  StateDict out = new_state_dict();
  out.insert("matrix_approximation_rank", s.o.matrix_approximation_rank());
  out.insert("start_powerSGD_iter", s.o.start_powerSGD_iter());
  out.insert("min_compression_rate", s.o.min_compression_rate());
  out.insert("use_error_feedback", s.o.use_error_feedback());
  out.insert("warm_start", s.o.warm_start());
  out.insert("orthogonalization_epsilon", s.o.orthogonalization_epsilon());
  out.insert("iter", s.iter);
  out.insert("total_numel_before_compression", s.numel_before);
  out.insert("total_numel_after_compression", s.numel_after);
  std::ostringstream rng;
  rng << s.rng;
  out.insert("rng", rng.str());
  // Error feedback is this rank's own: every rank's is gathered, one row per group rank (the
  // same buckets exist on every rank, so the collectives pair up).
  const int world = s.o.group().size();
  std::map<int64_t, at::Tensor> errors;
  for (const auto& [index, e] : s.error) errors[index] = dist::all_gather(e, s.o.group()).view({world, -1});
  out.insert("world_size", static_cast<int64_t>(world));
  out.insert("error_dict", save_buckets(errors));
  out.insert("q_memory_dict", save_buckets(s.q_memory));
  return out;
}

void PowerSgdHook::load_state_dict(const StateDict& state) {
  auto& s = *impl_;
  auto same = [&](const std::string& key, const c10::IValue& mine) {
    const c10::IValue saved = state.contains(key) ? state.at(key) : c10::IValue();
    KINDLING_CHECK(saved == mine, kWho, ": the checkpoint was saved with ", key, " = ", saved, " but this hook has ",
                   mine, "; make the hook with the same PowerSgdOptions to resume");
  };
  same("matrix_approximation_rank", s.o.matrix_approximation_rank());
  same("start_powerSGD_iter", s.o.start_powerSGD_iter());
  same("min_compression_rate", s.o.min_compression_rate());
  same("use_error_feedback", s.o.use_error_feedback());
  same("warm_start", s.o.warm_start());
  same("orthogonalization_epsilon", s.o.orthogonalization_epsilon());
  const int64_t iter = entry(state, "iter", &c10::IValue::isInt, "an integer").toInt();
  const int64_t before = entry(state, "total_numel_before_compression", &c10::IValue::isInt, "an integer").toInt();
  const int64_t after = entry(state, "total_numel_after_compression", &c10::IValue::isInt, "an integer").toInt();
  const int64_t world = entry(state, "world_size", &c10::IValue::isInt, "an integer").toInt();
  std::mt19937 rng;
  std::istringstream rng_text(entry(state, "rng", &c10::IValue::isString, "a string").toStringRef());
  rng_text >> rng;
  KINDLING_CHECK(!rng_text.fail(), kWho, ": key 'rng' does not hold a Mersenne Twister state");
  auto errors = load_buckets(entry(state, "error_dict", &c10::IValue::isGenericDict, "a dict"), "error_dict");
  auto q_memory = load_buckets(entry(state, "q_memory_dict", &c10::IValue::isGenericDict, "a dict"), "q_memory_dict");

  const int rank = s.o.group().rank();
  std::map<int64_t, at::Tensor> error;
  if (world == s.o.group().size()) {
    for (const auto& [index, rows] : errors) {
      KINDLING_CHECK(rows.dim() == 2 && rows.size(0) == world, kWho, ": error_dict['", index, "'] has shape ",
                     rows.sizes(), ", expected one row per rank (", world, ")");
      error[index] = rows[rank].clone();
    }
  } else if (!errors.empty()) {
    log(LogLevel::kWarning, std::string(kWho) + ": the checkpoint was saved by " + std::to_string(world) +
                                " ranks and is loaded by " + std::to_string(s.o.group().size()) +
                                "; each rank's error-feedback memory belongs to its old rank, so it is dropped "
                                "(the next compressed step starts without it)");
  }
  s.iter = iter;
  s.numel_before = before;
  s.numel_after = after;
  s.rng = rng;
  s.error = std::move(error);
  s.q_memory = std::move(q_memory);
  s.p_memory.clear();
  s.bucket_numel.clear();
}

std::shared_ptr<PowerSgdHook> powerSGD_hook(PowerSgdOptions options) {
  return std::make_shared<PowerSgdHook>(std::move(options));
}

}  // namespace nn
}  // namespace kindling
