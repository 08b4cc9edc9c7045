// Shared-memory all-reduce for single-node MPI communicators; see shm_allreduce.h.
#include "dist/backends/mpi/shm_allreduce.h"
#include "dist/backends/mpi/shm_heap.h"
#include "dist/backends/mpi/mpi_op.h"
#include "dist/backends/mpi/shm_kernels.h"

#include "kindling/error.h"

#include <sched.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

namespace kindling {
namespace dist {
namespace detail {
namespace {

constexpr int kSlots = 2;  // segments in flight per rank (double buffering)
constexpr std::int64_t kControlBytes = 4096;
constexpr std::int64_t kLine = 64;

char* align_line(char* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<char*>((a + kLine - 1) / kLine * kLine);
}
constexpr std::int64_t kDefaultSegmentBytes = 1 << 20;  // measured: 1 MiB beats 256 KiB and 4 MiB for staged tensors

// The segment size: one slot. KINDLING_MPI_SHM_SEGMENT (bytes, rounded to 4 KiB) is for
// experiments. The KINDLING_MPI_SHM_* values were checked at initialize (whole numbers in
// range, the same on every rank: dist/agreement.cpp), so atoll reads them safely here.
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
  // Open MPI does not place a rank's part of the window on a cache line (seen: page offset
  // 0x108), and Control is alignas(64): ask for one line more and align every part alike
  // (the page offset of a mapping is the same in every process).
  const MPI_Aint bytes = static_cast<MPI_Aint>(kControlBytes + kSlots * segment_bytes() + heap + kLine);
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
    s->base_[static_cast<std::size_t>(q)] = align_line(p);
  }
  mine = align_line(mine);
  static_assert(sizeof(Control) <= kControlBytes, "control block too large");
  new (mine) Control();
  s->heap_ = std::make_shared<ShmHeap>();
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
  if (heap_) heap_->evacuate();
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
  std::shared_ptr<ShmHeap> heap = heap_;
  at::Tensor t = at::from_blob(
      p, sizes, [heap](void* q) { heap->release(q); }, opts);
  std::lock_guard<std::mutex> lock(heap_->mu);
  heap_->owners.insert_or_assign(p - heap_->base, t.storage().getWeakStorageImpl());
  return t;
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
    if ((spins & 63) == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        broken_ = true;
        throw EngineTimeout("timed out: group rank " + std::to_string(q) + " did not " + phase +
                            " within the timeout (shared-memory all_reduce, group rank " + std::to_string(rank_) +
                            " waiting)");
      }
      if (stalled_ != nullptr && now >= next_check_) {
        next_check_ = now + std::chrono::milliseconds(250);
        const std::string why = (*stalled_)();
        if (!why.empty()) end_job_for_stall(why, "the shared-memory all_reduce");
      }
    }
    sched_yield();  // ranks may outnumber cores
  }
}

// What one run() call reduces, for its phases.
struct ShmAllreduce::Call {
  at::ScalarType dtype;
  ReduceOp op;
  std::int64_t elem;   // bytes per element
  std::int64_t numel;  // of the whole tensor
  std::int64_t tag;    // dtype and op, compared across ranks
  char* data;          // this rank's tensor
  bool direct;         // the tensor lies in this rank's heap: peers read and write it where it is
  std::chrono::steady_clock::time_point deadline;
  std::chrono::milliseconds timeout;
};

// One segment of the tensor: its sequence number s, and rank q's block of it, elements
// [lo(q), hi(q)), 64-byte aligned.
struct ShmAllreduce::Segment {
  std::int64_t s;
  std::int64_t start;  // first element
  std::int64_t m;      // elements
  std::int64_t block;
  char* seg;   // this rank's tensor at `start`
  char* mine;  // this rank's slot for s
  std::int64_t elem;
  std::int64_t lo(int q) const { return std::min(m, q * block); }
  std::int64_t hi(int q) const { return std::min(m, (q + 1) * block); }
  std::size_t bytes_of(int q) const { return static_cast<std::size_t>((hi(q) - lo(q)) * elem); }
};

// 1. My slot is free once every rank finished the segment that used it last. Staged ranks
//    copy the blocks others reduce into it; direct ones are read where they are.
void ShmAllreduce::announce(const Call& call, const Segment& g) {
  if (g.s > kSlots) wait_all(kFinished, g.s - kSlots, "finish an earlier all_reduce", call.deadline, call.timeout);
  if (!call.direct) {
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && g.hi(q) > g.lo(q))
        copy_bytes(g.mine + g.lo(q) * g.elem, g.seg + g.lo(q) * g.elem, g.bytes_of(q));
    }
  }
  Control* me = control(rank_);
  me->numel.value.store(call.numel, std::memory_order_relaxed);
  me->dtype_op.value.store(call.tag, std::memory_order_relaxed);
  me->counter[kArrived].value.store(g.s, std::memory_order_release);
}

// 2a. Once every rank arrived: checks that they reduce the same thing and finds each rank's
//     tensor (null for a staged one). Returns whether any rank is staged.
bool ShmAllreduce::locate_peers(const Call& call, const Segment& g, std::vector<char*>& where) {
  wait_all(kArrived, g.s, "enter the same all_reduce", call.deadline, call.timeout);
  bool any_staged = !call.direct;
  for (int q = 0; q < size_; ++q) {
    Control* c = control(q);
    if (c->numel.value.load(std::memory_order_relaxed) != call.numel ||
        c->dtype_op.value.load(std::memory_order_relaxed) != call.tag) {
      broken_ = true;
      throw UsageError(::kindling::detail::rank_prefix() +
                       "kindling::dist::all_reduce (mpi backend, shared memory): group rank " + std::to_string(rank_) +
                       " reduces " + std::to_string(call.numel) + " elements of " + c10::toString(call.dtype) +
                       " with " + to_string(call.op) + " but group rank " + std::to_string(q) +
                       " passed a different number of elements, dtype or op. Every rank must pass a tensor of the "
                       "same shape and dtype and the same op; this group's shared-memory path is now unusable");
    }
    const std::int64_t loc = c->location.value.load(std::memory_order_relaxed);
    where[static_cast<std::size_t>(q)] =
        loc == 0 ? nullptr : base_[static_cast<std::size_t>(q)] + (loc - 1) + g.start * g.elem;
    any_staged = any_staged || loc == 0;
  }
  return any_staged;
}

// 2b. Reduces my block from everyone's data, in rank order; writes it to my tensor, to every
//     direct peer's tensor, and (for staged peers to collect) to my slot.
void ShmAllreduce::reduce_block(const Call& call, const Segment& g, const std::vector<char*>& where) {
  if (g.hi(rank_) > g.lo(rank_)) {
    const std::int64_t off = g.lo(rank_) * g.elem;
    std::vector<const void*> src(static_cast<std::size_t>(size_));
    for (int q = 0; q < size_; ++q) {
      char* w = where[static_cast<std::size_t>(q)];
      src[static_cast<std::size_t>(q)] = q == rank_ ? g.seg + off : (w ? w : slot(q, g.s)) + off;
    }
    // The first output is my tensor; the second my slot when I am staged (peers collect
    // from there), else the first direct peer's tensor. Other direct peers get a copy.
    char* second = g.mine + off;
    if (call.direct) {
      for (int q = 0; q < size_; ++q) {
        if (q != rank_ && where[static_cast<std::size_t>(q)]) {
          second = where[static_cast<std::size_t>(q)] + off;
          break;
        }
      }
    }
    fold_any(call.dtype, call.op, g.seg + off, second, src, g.hi(rank_) - g.lo(rank_));
    for (int q = 0; q < size_; ++q) {
      char* w = where[static_cast<std::size_t>(q)];
      if (q == rank_ || !w || w + off == second) continue;
      copy_bytes(w + off, g.seg + off, g.bytes_of(rank_));
    }
  }
  control(rank_)->counter[kReduced].value.store(g.s, std::memory_order_release);
}

// 3. Collects the other blocks (staged) or waits until every peer wrote its block into my
//    tensor (direct). Block q of a staged reducer is in its slot, of a direct one in its
//    tensor.
void ShmAllreduce::collect(const Call& call, const Segment& g, const std::vector<char*>& where) {
  for (int k = 1; k < size_; ++k) {
    const int q = (rank_ + k) % size_;
    wait_for(q, kReduced, g.s, "reduce its block", call.deadline, call.timeout);
    if (call.direct || g.hi(q) <= g.lo(q)) continue;
    char* w = where[static_cast<std::size_t>(q)];
    copy_bytes(g.seg + g.lo(q) * g.elem, (w ? w : slot(q, g.s)) + g.lo(q) * g.elem, g.bytes_of(q));
  }
  control(rank_)->counter[kFinished].value.store(g.s, std::memory_order_release);
}

void ShmAllreduce::run(at::Tensor& t, ReduceOp op, std::chrono::milliseconds timeout, const StallCheck* stalled) {
  if (broken_) {
    throw CommunicationError(::kindling::detail::rank_prefix() +
                             "kindling::dist::all_reduce (mpi backend, shared memory): this group's "
                             "ranks are out of step after an earlier timeout or mismatch on group rank " +
                             std::to_string(rank_) + "; end the job and fix the first error");
  }
  Call call;
  call.deadline = std::chrono::steady_clock::now() + timeout;
  call.timeout = timeout;
  stalled_ = stalled;
  next_check_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  call.dtype = t.scalar_type();
  call.op = op;
  call.elem = static_cast<std::int64_t>(t.element_size());
  call.numel = t.numel();
  call.tag = (static_cast<std::int64_t>(call.dtype) << 8) | static_cast<std::int64_t>(op);
  call.data = static_cast<char*>(t.data_ptr());
  // A tensor inside my heap can be read and written by the peers where it is.
  call.direct = call.data >= heap_->base && call.data + call.numel * call.elem <= heap_->base + heap_->capacity;
  char* my_base = base_[static_cast<std::size_t>(rank_)];
  control(rank_)->location.value.store(call.direct ? 1 + (call.data - my_base) : 0, std::memory_order_relaxed);
  const std::int64_t seg_elems = segment_bytes() / call.elem;
  const std::int64_t align = std::max<std::int64_t>(1, 64 / call.elem);
  std::vector<char*> where(static_cast<std::size_t>(size_));  // each rank's tensor, if direct, else null
  for (std::int64_t start = 0; start < call.numel; start += seg_elems) {
    Segment g;
    g.s = ++seq_;
    g.start = start;
    g.m = std::min(seg_elems, call.numel - start);
    g.block = ((g.m + size_ - 1) / size_ + align - 1) / align * align;
    g.seg = call.data + start * call.elem;
    g.mine = slot(rank_, g.s);
    g.elem = call.elem;
    announce(call, g);
    const bool any_staged = locate_peers(call, g, where);
    reduce_block(call, g, where);
    collect(call, g, where);
    // A direct rank's tensor is read by staged peers in their step 3: it may change only
    // after they finished.
    if (call.direct && any_staged) wait_all(kFinished, g.s, "finish reading my tensor", call.deadline, call.timeout);
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
