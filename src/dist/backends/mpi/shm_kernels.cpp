// Copies and reduction kernels of the shared-memory all-reduce; see shm_kernels.h.
#include "dist/backends/mpi/shm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

namespace kindling {
namespace dist {
namespace detail {

// ---- copies -----------------------------------------------------------------------------
// glibc's memcpy (rep movsb) runs up to 10x slower on some AMD CPUs when source and
// destination share their offset within a 4 KiB page, which staging through page-aligned
// slots hits at random (measured here: 4 vs 40 GB/s). Plain vector loads and stores do not.
#if defined(__x86_64__)
namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace detail
}  // namespace dist
}  // namespace kindling
