// Shared-memory all-reduce for single-node MPI communicators; see shm_allreduce.h.
#include "dist/backends/mpi/shm_allreduce.h"

#include "kindling/error.h"

#include <sched.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

namespace kindling {
namespace dist {
namespace detail {
namespace {

constexpr int kSlots = 2;  // segments in flight per rank (double buffering)
constexpr std::int64_t kControlBytes = 4096;
constexpr std::int64_t kDefaultSegmentBytes = 1 << 20;  // measured: 1 MiB beats 256 KiB and 4 MiB for staged tensors

// The segment size: one slot. KINDLING_MPI_SHM_SEGMENT (bytes, rounded to 4 KiB) is for
// experiments; every rank must see the same value.
std::int64_t segment_bytes() {
  static const std::int64_t bytes = [] {
    std::int64_t b = kDefaultSegmentBytes;
    if (const char* env = std::getenv("KINDLING_MPI_SHM_SEGMENT")) {
      const long long v = std::atoll(env);
      if (v >= 4096) b = static_cast<std::int64_t>(v) / 4096 * 4096;
    }
    return b;
  }();
  return bytes;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// ---- copies -----------------------------------------------------------------------------
// glibc's memcpy (rep movsb) runs up to 10x slower on some AMD CPUs when source and
// destination share their offset within a 4 KiB page, which staging through page-aligned
// slots hits at random (measured here: 4 vs 40 GB/s). Plain vector loads and stores do not.
#if defined(__x86_64__)
__attribute__((target("avx2"))) void copy_avx2(char* dst, const char* src, std::size_t n) {
  std::size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  if (i < n) std::memcpy(dst + i, src + i, n - i);
}
void copy_sse2(char* dst, const char* src, std::size_t n) {
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  if (i < n) std::memcpy(dst + i, src + i, n - i);
}
void copy_bytes(void* dst, const void* src, std::size_t n) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    copy_avx2(static_cast<char*>(dst), static_cast<const char*>(src), n);
  } else {
    copy_sse2(static_cast<char*>(dst), static_cast<const char*>(src), n);
  }
}
#else
void copy_bytes(void* dst, const void* src, std::size_t n) { std::memcpy(dst, src, n); }
#endif

// ---- reduction kernels ------------------------------------------------------------------
// Integer sums and products wrap (computed in the unsigned type: no signed overflow).
template <typename T, bool = std::is_integral<T>::value>
struct ArithOf {
  using type = T;
};
template <typename T>
struct ArithOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T>
using Arith = typename ArithOf<T>::type;

template <typename T>
struct SumOp {
  static T apply(T a, T b) { return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b)); }
};
template <typename T>
struct ProdOp {
  static T apply(T a, T b) { return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b)); }
};
// NaN propagates (as torch.minimum / maximum do).
template <typename T>
struct MinOp {
  static T apply(T a, T b) { return a != a ? a : (a < b ? a : b); }
};
template <typename T>
struct MaxOp {
  static T apply(T a, T b) { return a != a ? a : (a > b ? a : b); }
};
template <typename T>
struct AndOp {
  static T apply(T a, T b) { return static_cast<T>(a & b); }
};
template <typename T>
struct OrOp {
  static T apply(T a, T b) { return static_cast<T>(a | b); }
};

// out1[i] = out2[i] = op(a[i], b[i]); out1 may alias a or b.
template <typename T, typename Op>
void combine2(T* out1, T* __restrict out2, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T v = Op::apply(a[i], b[i]);
    out1[i] = v;
    out2[i] = v;
  }
}
template <typename T, typename Op>
void combine(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

// Folds src[0..n) in order into out1 and out2, L1-sized pieces at a time.
template <typename T, typename Op>
void fold(T* out1, T* out2, const std::vector<const T*>& src, std::int64_t count) {
  const std::size_t n = src.size();
  if (n == 2) {
    combine2<T, Op>(out1, out2, src[0], src[1], count);
    return;
  }
  constexpr std::int64_t kPiece = 16384 / sizeof(T);
  T tmp[kPiece];
  for (std::int64_t at = 0; at < count; at += kPiece) {
    const std::int64_t m = std::min(kPiece, count - at);
    combine<T, Op>(tmp, src[0] + at, src[1] + at, m);
    for (std::size_t q = 2; q + 1 < n; ++q) combine<T, Op>(tmp, tmp, src[q] + at, m);
    combine2<T, Op>(out1 + at, out2 + at, tmp, src[n - 1] + at, m);
  }
}

template <typename T>
void fold_op(ReduceOp op, void* out1, void* out2, const std::vector<const void*>& src, std::int64_t count) {
  std::vector<const T*> s(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) s[i] = static_cast<const T*>(src[i]);
  T* o1 = static_cast<T*>(out1);
  T* o2 = static_cast<T*>(out2);
  switch (op) {
    case ReduceOp::kSum: return fold<T, SumOp<T>>(o1, o2, s, count);
    case ReduceOp::kProduct: return fold<T, ProdOp<T>>(o1, o2, s, count);
    case ReduceOp::kMin: return fold<T, MinOp<T>>(o1, o2, s, count);
    case ReduceOp::kMax: return fold<T, MaxOp<T>>(o1, o2, s, count);
    case ReduceOp::kAnd:
      if constexpr (std::is_integral<T>::value) return fold<T, AndOp<T>>(o1, o2, s, count);
      break;
    case ReduceOp::kOr:
      if constexpr (std::is_integral<T>::value) return fold<T, OrOp<T>>(o1, o2, s, count);
      break;
  }
  throw std::logic_error("kindling::dist: shared-memory all_reduce has no kernel for this op");
}

void fold_any(at::ScalarType t, ReduceOp op, void* out1, void* out2, const std::vector<const void*>& src,
              std::int64_t count) {
  switch (t) {
    case at::kFloat: return fold_op<float>(op, out1, out2, src, count);
    case at::kDouble: return fold_op<double>(op, out1, out2, src, count);
    case at::kLong: return fold_op<std::int64_t>(op, out1, out2, src, count);
    case at::kInt: return fold_op<std::int32_t>(op, out1, out2, src, count);
    case at::kShort: return fold_op<std::int16_t>(op, out1, out2, src, count);
    case at::kChar: return fold_op<std::int8_t>(op, out1, out2, src, count);
    case at::kByte:
    case at::kBool:  // 0/1 bytes: AND/OR/MIN/MAX as on uint8
      return fold_op<std::uint8_t>(op, out1, out2, src, count);
    default: throw std::logic_error("kindling::dist: shared-memory all_reduce has no kernel for this dtype");
  }
}

bool has_kernel(at::ScalarType t, ReduceOp op) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
      return op == ReduceOp::kSum || op == ReduceOp::kProduct || op == ReduceOp::kMin || op == ReduceOp::kMax;
    case at::kLong:
    case at::kInt:
    case at::kShort:
    case at::kChar:
    case at::kByte: return true;
    case at::kBool: return op != ReduceOp::kSum && op != ReduceOp::kProduct;
    default: return false;
  }
}

}  // namespace

// One cache line per counter: ranks poll each other's lines.
struct alignas(64) Line {
  std::atomic<std::int64_t> value{0};
  char pad[64 - sizeof(std::atomic<std::int64_t>)];
};
struct ShmAllreduce::Control {
  Line counter[3];       // arrived, reduced, finished: the last segment this rank completed the phase of
  Line numel, dtype_op;  // what the rank is reducing, checked against the peers
  Line location;         // 0: staged through my slots; else 1 + offset of my tensor in my window
};
enum { kArrived = 0, kReduced = 1, kFinished = 2 };

// The communication-buffer heap in this rank's part of the window: first fit, 256-byte
// aligned blocks. Shared with the tensors' deleters, so it outlives the communicator.
struct ShmAllreduce::Heap {
  std::mutex mu;
  char* base = nullptr;
  std::int64_t capacity = 0;
  std::map<std::int64_t, std::int64_t> free;  // offset -> bytes
  std::map<std::int64_t, std::int64_t> used;

  char* allocate(std::int64_t bytes) {
    bytes = std::max<std::int64_t>(256, (bytes + 255) / 256 * 256);
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < bytes) continue;
      const std::int64_t off = it->first, left = it->second - bytes;
      free.erase(it);
      if (left > 0) free.emplace(off + bytes, left);
      used.emplace(off, bytes);
      return base + off;
    }
    return nullptr;
  }
  void release(void* p) {
    std::lock_guard<std::mutex> lock(mu);
    auto u = used.find(static_cast<char*>(p) - base);
    if (u == used.end()) return;
    std::int64_t off = u->first, bytes = u->second;
    used.erase(u);
    auto next = free.lower_bound(off);
    if (next != free.end() && off + bytes == next->first) {
      bytes += next->second;
      next = free.erase(next);
    }
    if (next != free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        prev->second += bytes;
        return;
      }
    }
    free.emplace(off, bytes);
  }
};

std::int64_t ShmAllreduce::min_bytes() {
  static const std::int64_t bytes = [] {
    std::int64_t b = 8 << 10;  // measured crossover with MPI_Allreduce on ordinary tensors: 4-8 KiB
    if (const char* env = std::getenv("KINDLING_MPI_SHM_MIN_BYTES")) b = std::atoll(env);
    return b;
  }();
  return bytes;
}

namespace {
std::int64_t heap_bytes() {
  static const std::int64_t bytes = [] {
    std::int64_t mb = 256;
    if (const char* env = std::getenv("KINDLING_MPI_SHM_HEAP_MB")) mb = std::max(0LL, std::atoll(env));
    return mb << 20;
  }();
  return bytes;
}
}  // namespace

std::unique_ptr<ShmAllreduce> ShmAllreduce::create(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size < 2 || std::getenv("KINDLING_MPI_NO_SHM") != nullptr) return nullptr;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) != MPI_SUCCESS) return nullptr;
  int node_size = 0;
  MPI_Comm_size(node, &node_size);
  // Every rank sees the same answer: either all members are on this node or each node's
  // share is smaller than the communicator.
  if (node_size != size) {
    MPI_Comm_free(&node);
    return nullptr;
  }
  MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  std::unique_ptr<ShmAllreduce> s(new ShmAllreduce());
  s->comm_ = node;
  MPI_Comm_rank(node, &s->rank_);
  s->size_ = size;
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  char* mine = nullptr;
  // The heap's pages are only backed when a buffer first touches them, but the window is a
  // file in /dev/shm: never promise the ranks more than half of its free space together.
  std::int64_t heap = heap_bytes();
  struct statvfs fs;
  if (statvfs("/dev/shm", &fs) == 0) {
    const std::int64_t room = static_cast<std::int64_t>(fs.f_bavail) * static_cast<std::int64_t>(fs.f_frsize);
    heap = std::min(heap, (room / 2 / size - kSlots * segment_bytes()) / (1 << 20) * (1 << 20));
    heap = std::max<std::int64_t>(0, heap);
  }
  const MPI_Aint bytes = static_cast<MPI_Aint>(kControlBytes + kSlots * segment_bytes() + heap);
  const int rc = MPI_Win_allocate_shared(bytes, 1, info, node, &mine, &s->win_);
  MPI_Info_free(&info);
  if (rc != MPI_SUCCESS) {
    // Collective: every rank fails alike (e.g. no room in the shared-memory directory).
    s->win_ = MPI_WIN_NULL;
    return nullptr;
  }
  s->base_.resize(static_cast<std::size_t>(size));
  for (int q = 0; q < size; ++q) {
    MPI_Aint qbytes = 0;
    int disp = 0;
    char* p = nullptr;
    MPI_Win_shared_query(s->win_, q, &qbytes, &disp, &p);
    s->base_[static_cast<std::size_t>(q)] = p;
  }
  static_assert(sizeof(Control) <= kControlBytes, "control block too large");
  new (mine) Control();
  s->heap_ = std::make_shared<Heap>();
  s->heap_->base = mine + kControlBytes + kSlots * segment_bytes();
  s->heap_->capacity = heap;
  if (heap > 0) s->heap_->free.emplace(0, heap);
  MPI_Barrier(node);  // every control block is initialized before anyone polls it
  return s;
}

ShmAllreduce::~ShmAllreduce() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

ShmAllreduce::Control* ShmAllreduce::control(int rank) const {
  return reinterpret_cast<Control*>(base_[static_cast<std::size_t>(rank)]);
}

char* ShmAllreduce::slot(int rank, std::int64_t s) const {
  return base_[static_cast<std::size_t>(rank)] + kControlBytes + (s % kSlots) * segment_bytes();
}

at::Tensor ShmAllreduce::empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const auto opts = options.device(at::kCPU);
  int64_t numel = 1;
  for (auto d : sizes) numel *= d;
  const std::int64_t bytes =
      numel * static_cast<std::int64_t>(c10::elementSize(c10::typeMetaToScalarType(opts.dtype())));
  char* p = heap_->allocate(bytes);
  if (p == nullptr) return at::empty(sizes, opts);  // heap full: an ordinary tensor (staged path)
  std::shared_ptr<Heap> heap = heap_;
  return at::from_blob(
      p, sizes, [heap](void* q) { heap->release(q); }, opts);
}

bool ShmAllreduce::handles(const at::Tensor& t, ReduceOp op) const {
  return t.is_contiguous() && t.device().is_cpu() && static_cast<std::int64_t>(t.nbytes()) >= min_bytes() &&
         has_kernel(t.scalar_type(), op);
}

void ShmAllreduce::wait_all(int which, std::int64_t value, const char* phase,
                            std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout) {
  for (int q = 0; q < size_; ++q) {
    if (q != rank_) wait_for(q, which, value, phase, deadline, timeout);
  }
}

void ShmAllreduce::wait_for(int q, int which, std::int64_t value, const char* phase,
                            std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds timeout) {
  const auto& line = control(q)->counter[which].value;
  for (long spins = 0; line.load(std::memory_order_acquire) < value; ++spins) {
    if (spins < 4000) {
      cpu_relax();
      continue;
    }
    if ((spins & 63) == 0 && std::chrono::steady_clock::now() >= deadline) {
      broken_ = true;
      throw std::runtime_error("timed out: group rank " + std::to_string(q) + " did not " + phase +
                               " within the timeout (shared-memory all_reduce, group rank " + std::to_string(rank_) +
                               " waiting)");
    }
    sched_yield();  // ranks may outnumber cores
  }
}

void ShmAllreduce::run(at::Tensor& t, ReduceOp op, std::chrono::milliseconds timeout) {
  if (broken_) {
    throw CommunicationError(::kindling::detail::rank_prefix() +
                             "kindling::dist::all_reduce (mpi backend, shared memory): this group's "
                             "ranks are out of step after an earlier timeout or mismatch on group rank " +
                             std::to_string(rank_) + "; end the job and fix the first error");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto dtype = t.scalar_type();
  const std::int64_t elem = static_cast<std::int64_t>(t.element_size());
  const std::int64_t numel = t.numel();
  const std::int64_t seg_elems = segment_bytes() / elem;
  const std::int64_t align = std::max<std::int64_t>(1, 64 / elem);
  char* data = static_cast<char*>(t.data_ptr());
  const std::int64_t tag = (static_cast<std::int64_t>(dtype) << 8) | static_cast<std::int64_t>(op);
  // A tensor inside my heap can be read and written by the peers where it is.
  char* my_base = base_[static_cast<std::size_t>(rank_)];
  const bool direct = data >= heap_->base && data + numel * elem <= heap_->base + heap_->capacity;
  Control* me = control(rank_);
  me->location.value.store(direct ? 1 + (data - my_base) : 0, std::memory_order_relaxed);
  std::vector<const void*> src(static_cast<std::size_t>(size_));
  std::vector<char*> where(static_cast<std::size_t>(size_));  // each rank's tensor, if direct, else null

  for (std::int64_t start = 0; start < numel; start += seg_elems) {
    const std::int64_t m = std::min(seg_elems, numel - start);
    const std::int64_t s = ++seq_;
    char* seg = data + start * elem;
    // Rank q's block of this segment: [lo(q), hi(q)) elements, 64-byte aligned.
    const std::int64_t block = ((m + size_ - 1) / size_ + align - 1) / align * align;
    auto lo = [&](int q) { return std::min(m, q * block); };
    auto hi = [&](int q) { return std::min(m, (q + 1) * block); };
    auto bytes_of = [&](int q) { return static_cast<std::size_t>((hi(q) - lo(q)) * elem); };

    // 1. My slot is free once every rank finished the segment that used it last. Staged
    //    ranks copy the blocks others reduce into it; direct ones are read where they are.
    if (s > kSlots) wait_all(kFinished, s - kSlots, "finish an earlier all_reduce", deadline, timeout);
    char* mine = slot(rank_, s);
    if (!direct) {
      for (int q = 0; q < size_; ++q) {
        if (q != rank_ && hi(q) > lo(q)) copy_bytes(mine + lo(q) * elem, seg + lo(q) * elem, bytes_of(q));
      }
    }
    me->numel.value.store(numel, std::memory_order_relaxed);
    me->dtype_op.value.store(tag, std::memory_order_relaxed);
    me->counter[kArrived].value.store(s, std::memory_order_release);

    // 2. Reduce my block from everyone's data, in rank order; write it to my tensor, to
    //    every direct peer's tensor, and (for staged peers to collect) to my slot.
    wait_all(kArrived, s, "enter the same all_reduce", deadline, timeout);
    bool any_staged = !direct;
    for (int q = 0; q < size_; ++q) {
      Control* c = control(q);
      if (c->numel.value.load(std::memory_order_relaxed) != numel ||
          c->dtype_op.value.load(std::memory_order_relaxed) != tag) {
        broken_ = true;
        throw UsageError(::kindling::detail::rank_prefix() +
                         "kindling::dist::all_reduce (mpi backend, shared memory): group rank " +
                         std::to_string(rank_) + " reduces " + std::to_string(numel) + " elements of " +
                         c10::toString(dtype) + " with " + to_string(op) + " but group rank " + std::to_string(q) +
                         " passed a different number of elements, dtype or op. Every rank must pass a tensor of the "
                         "same shape and dtype and the same op; this group's shared-memory path is now unusable");
      }
      const std::int64_t loc = c->location.value.load(std::memory_order_relaxed);
      where[static_cast<std::size_t>(q)] =
          loc == 0 ? nullptr : base_[static_cast<std::size_t>(q)] + (loc - 1) + start * elem;
      any_staged = any_staged || loc == 0;
    }
    if (hi(rank_) > lo(rank_)) {
      const std::int64_t off = lo(rank_) * elem;
      for (int q = 0; q < size_; ++q) {
        char* w = where[static_cast<std::size_t>(q)];
        src[static_cast<std::size_t>(q)] = q == rank_ ? seg + off : (w ? w : slot(q, s)) + off;
      }
      // The first output is my tensor; the second my slot when I am staged (peers collect
      // from there), else the first direct peer's tensor. Other direct peers get a copy.
      char* second = mine + off;
      if (direct) {
        for (int q = 0; q < size_; ++q) {
          if (q != rank_ && where[static_cast<std::size_t>(q)]) {
            second = where[static_cast<std::size_t>(q)] + off;
            break;
          }
        }
      }
      fold_any(dtype, op, seg + off, second, src, hi(rank_) - lo(rank_));
      for (int q = 0; q < size_; ++q) {
        char* w = where[static_cast<std::size_t>(q)];
        if (q == rank_ || !w || w + off == second) continue;
        copy_bytes(w + off, seg + off, bytes_of(rank_));
      }
    }
    me->counter[kReduced].value.store(s, std::memory_order_release);

    // 3. Collect the other blocks (staged) or wait until every peer wrote its block into
    //    my tensor (direct). Block q of a staged reducer is in its slot, of a direct one in
    //    its tensor.
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      wait_for(q, kReduced, s, "reduce its block", deadline, timeout);
      if (direct || hi(q) <= lo(q)) continue;
      char* w = where[static_cast<std::size_t>(q)];
      copy_bytes(seg + lo(q) * elem, (w ? w : slot(q, s)) + lo(q) * elem, bytes_of(q));
    }
    me->counter[kFinished].value.store(s, std::memory_order_release);
    // A direct rank's tensor is read by staged peers in their step 3: it may change only
    // after they finished.
    if (direct && any_staged) wait_all(kFinished, s, "finish reading my tensor", deadline, timeout);
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
