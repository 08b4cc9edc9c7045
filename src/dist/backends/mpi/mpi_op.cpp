// MPI helpers of the mpi backend (see mpi_op.h): errors, datatypes and ops, the watchdog
// that guards blocking collectives, and MpiOp's waiting and polling.
#include "dist/backends/mpi/mpi_op.h"

#include <sched.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {
namespace detail {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw std::runtime_error(std::string(call) + " failed: " + mpi_error(code));
}

MPI_Datatype mpi_type(at::ScalarType t, bool for_reduction) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kComplexFloat: return MPI_C_FLOAT_COMPLEX;
    case at::kComplexDouble: return MPI_C_DOUBLE_COMPLEX;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;  // moved as 16-bit words; reduced by kindling's own ops (mpi_op)
    default: break;
  }
  KINDLING_CHECK(false, "kindling::dist: the mpi backend cannot ", for_reduction ? "reduce" : "move",
                 " tensors of dtype ", c10::toString(t),
                 for_reduction ? "; convert to float32 (or float64) before the reduction" : "");
  return MPI_BYTE;
}

namespace {

// MPI has no 16-bit floating types: float16 and bfloat16 travel as 16-bit words and are
// reduced by these ops, element by element in float32 and rounded back (as gloo does).
template <typename T, typename Combine>
void combine16(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = T(Combine()(static_cast<float>(a[i]), static_cast<float>(b[i])));
}
struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};

template <typename T>
MPI_Op create16(ReduceOp op) {
  MPI_User_function* fn = nullptr;
  switch (op) {
    case ReduceOp::kSum: fn = combine16<T, std::plus<float>>; break;
    case ReduceOp::kProduct: fn = combine16<T, std::multiplies<float>>; break;
    case ReduceOp::kMin: fn = combine16<T, Min>; break;
    case ReduceOp::kMax: fn = combine16<T, Max>; break;
    default: break;  // refused by op16
  }
  MPI_Op out = MPI_OP_NULL;
  check(MPI_Op_create(fn, /*commute=*/1, &out), "MPI_Op_create");
  return out;  // kept until MPI_Finalize frees it
}

// One op per (dtype, op), made on first use (after MPI_Init).
MPI_Op op16(ReduceOp op, at::ScalarType t) {
  KINDLING_CHECK(op != ReduceOp::kAnd && op != ReduceOp::kOr, "kindling::dist: the mpi backend cannot ", to_string(op),
                 " floating-point tensors; use kSum, kProduct, kMin or kMax");
  static std::mutex mu;
  static MPI_Op made[2][4] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                              {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
  const int which = op == ReduceOp::kSum ? 0 : op == ReduceOp::kProduct ? 1 : op == ReduceOp::kMin ? 2 : 3;
  std::lock_guard<std::mutex> lock(mu);
  MPI_Op& slot = made[t == at::kHalf ? 0 : 1][which];
  if (slot == MPI_OP_NULL) slot = t == at::kHalf ? create16<c10::Half>(op) : create16<c10::BFloat16>(op);
  return slot;
}

}  // namespace

MPI_Op mpi_op(ReduceOp op, at::ScalarType t) {
  if (t == at::kHalf || t == at::kBFloat16) return op16(op, t);
  const bool complex = at::isComplexType(t);
  KINDLING_CHECK(!complex || op == ReduceOp::kSum || op == ReduceOp::kProduct,
                 "kindling::dist: the mpi backend cannot ", to_string(op),
                 " complex tensors (MPI defines only SUM and PRODUCT for them)");
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kProduct: return MPI_PROD;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kAnd: return t == at::kBool ? MPI_LAND : MPI_BAND;
    case ReduceOp::kOr: return t == at::kBool ? MPI_LOR : MPI_BOR;
  }
  return MPI_SUM;
}

int count_of(const at::Tensor& t) {
  KINDLING_CHECK(t.numel() <= std::numeric_limits<int>::max(),
                 "kindling::dist: the mpi backend moves at most 2^31-1 "
                 "elements per call, got ",
                 t.numel(), "; split the tensor");
  return static_cast<int>(t.numel());
}

void end_job_for_stall(std::string why, const char* call) {
  // log() tags the line with the rank itself.
  const std::string tag = ::kindling::detail::rank_prefix();
  if (why.rfind(tag, 0) == 0) why.erase(0, tag.size());
  log(LogLevel::kCritical, why + " (mpi backend: " + call +
                               " waits on that rank, and MPI could neither free this rank's windows and "
                               "communicators nor finalize without it, so kindling ends the job with MPI_Abort)");
  MPI_Abort(MPI_COMM_WORLD, 124);
  std::_Exit(124);
}

namespace {

// Open MPI's non-blocking collectives (libnbc) run other, slower algorithms than its
// blocking ones (2-2.5x slower at 4 MiB on shared memory here), so collectives run as
// blocking calls. A blocking MPI call cannot be interrupted: this watchdog ends the whole
// job with a clear message when one outlives its timeout, instead of hanging.
class Watchdog {
 public:
  static Watchdog& get() {
    static Watchdog* w = new Watchdog();  // never destroyed: may run until exit
    return *w;
  }
  // `stalled` (may be null) must stay valid until disarm().
  void arm(const char* call, std::chrono::milliseconds timeout, const StallCheck* stalled) {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = call;
    timeout_ = timeout;
    stalled_ = stalled;
    armed_at_ = std::chrono::steady_clock::now();
    next_check_ = armed_at_ + std::chrono::seconds(1);
    deadline_ = armed_at_ + timeout;
    armed_ = true;
    if (!thread_started_) {
      thread_started_ = true;
      std::thread([this] { loop(); }).detach();
    }
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void loop() {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard<std::mutex> lock(mu_);
      if (!armed_) continue;
      const auto now = std::chrono::steady_clock::now();
      if (stalled_ != nullptr && now >= next_check_) {
        next_check_ = now + std::chrono::milliseconds(250);
        const std::string why = (*stalled_)();
        if (!why.empty()) end_job_for_stall(why, call_);
      }
      if (now < deadline_) continue;
      log(LogLevel::kCritical,
          std::string("kindling::dist (mpi backend): ") + call_ + " did not complete within the timeout of " +
              std::to_string(timeout_.count()) +
              " ms. A blocking MPI collective cannot be cancelled, so kindling ends the job (MPI_Abort). Every rank "
              "must call the same collectives in the same order; look for a rank that skipped this one or failed "
              "earlier, or raise InitOptions::timeout if a rank is only slow.");
      MPI_Abort(MPI_COMM_WORLD, 124);
      std::_Exit(124);
    }
  }
  std::mutex mu_;
  const char* call_ = "";
  std::chrono::milliseconds timeout_{0};
  const StallCheck* stalled_ = nullptr;
  std::chrono::steady_clock::time_point armed_at_, next_check_, deadline_;
  bool armed_ = false;
  bool thread_started_ = false;
};

}  // namespace

void MpiOp::wait_for(std::chrono::milliseconds timeout, const StallCheck* stalled) {
  if (timed_) {
    if (done_) return;
    timed_(timeout, stalled);
    done_ = true;
    if (on_done_) on_done_();
    return;
  }
  if (blocking_) {
    if (done_) return;
    Watchdog::get().arm(call_, timeout, stalled);
    const int rc = blocking_();
    Watchdog::get().disarm();
    check(rc, call_);
    done_ = true;
    if (on_done_) on_done_();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  for (long spins = 0; !test(); ++spins) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw EngineTimeout(std::string(call_) + " timed out after " + std::to_string(timeout.count()) +
                          " ms (the MPI operation is still pending; this process should exit)");
    }
    // Busy-poll first (shared-memory latency is in microseconds), then give the core away.
    if (spins > 20000) {
      if (now - start > std::chrono::seconds(1)) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      } else {
        sched_yield();
      }
    }
  }
}

bool MpiOp::test() {
  if (done_) return true;
  int flag = 0;
  std::vector<MPI_Status> statuses(requests_.size());
  check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, statuses.data()), call_);
  if (!flag) return false;
  if (!statuses.empty()) source_ = statuses.front().MPI_SOURCE;
  done_ = true;
  if (on_done_) on_done_();
  return true;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
