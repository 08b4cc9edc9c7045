#pragma once
/// \file
/// Serialization of values for the object collectives (all_gather_object, broadcast_object).
///
/// A value is encoded as its type signature followed by its payload, so a rank that
/// receives a value of another type gets a kindling::UsageError naming both types instead
/// of garbage. Supported out of the box: arithmetic types and bool, std::string,
/// at::Tensor (any dtype and shape; decoded on the CPU), and std::vector, std::map,
/// std::unordered_map and std::pair of supported types, nested to any depth.
///
/// To make your own type serializable, specialize kindling::dist::Codec<T> with three
/// static members: `std::string name()`, `void encode(ByteWriter&, const T&)` and
/// `T decode(ByteReader&)`.

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kindling/error.h"
#include "kindling/export.h"

namespace kindling {
namespace dist {

/// Appends raw bytes to a buffer.
class ByteWriter {
 public:
  void write(const void* data, std::size_t size) { bytes_.append(static_cast<const char*>(data), size); }
  template <typename T>
  void pod(const T& value) {
    static_assert(std::is_trivially_copyable<T>::value, "pod() needs a trivially copyable type");
    write(&value, sizeof(T));
  }
  void string(const std::string& s) {
    pod<std::uint64_t>(s.size());
    write(s.data(), s.size());
  }
  std::string& bytes() { return bytes_; }

 private:
  std::string bytes_;
};

/// Reads raw bytes from a buffer; throws kindling::UsageError when it runs past the end.
class ByteReader {
 public:
  explicit ByteReader(const std::string& bytes) : bytes_(bytes) {}
  void read(void* out, std::size_t size) {
    KINDLING_CHECK(size <= bytes_.size() - pos_, "kindling::dist deserialization: the message is truncated (",
                   bytes_.size(), " bytes, needed ", pos_ + size,
                   "); the sender and receiver disagree on the value's type");
    std::memcpy(out, bytes_.data() + pos_, size);
    pos_ += size;
  }
  template <typename T>
  T pod() {
    T value;
    read(&value, sizeof(T));
    return value;
  }
  std::string string() {
    auto size = pod<std::uint64_t>();
    KINDLING_CHECK(size <= bytes_.size() - pos_, "kindling::dist deserialization: string length ", size,
                   " exceeds the message");
    std::string s(bytes_.data() + pos_, size);
    pos_ += size;
    return s;
  }
  bool done() const { return pos_ == bytes_.size(); }
  /// Bytes not read yet.
  std::size_t remaining() const { return bytes_.size() - pos_; }

 private:
  const std::string& bytes_;
  std::size_t pos_ = 0;
};

/// Encoder/decoder of one type. Specialize it for your own types (see the file comment).
template <typename T, typename Enable = void>
struct Codec;

namespace detail {
template <typename T>
struct ArithmeticName;
#define KINDLING_ARITH_NAME(type, text)       \
  template <>                                 \
  struct ArithmeticName<type> {               \
    static const char* get() { return text; } \
  };
KINDLING_ARITH_NAME(bool, "bool")
KINDLING_ARITH_NAME(char, "char")
KINDLING_ARITH_NAME(signed char, "int8")
KINDLING_ARITH_NAME(unsigned char, "uint8")
KINDLING_ARITH_NAME(short, "int16")
KINDLING_ARITH_NAME(unsigned short, "uint16")
KINDLING_ARITH_NAME(int, "int32")
KINDLING_ARITH_NAME(unsigned int, "uint32")
KINDLING_ARITH_NAME(long, "int64")
KINDLING_ARITH_NAME(unsigned long, "uint64")
KINDLING_ARITH_NAME(long long, "int64")
KINDLING_ARITH_NAME(unsigned long long, "uint64")
KINDLING_ARITH_NAME(float, "float32")
KINDLING_ARITH_NAME(double, "float64")
KINDLING_ARITH_NAME(long double, "long double")  // x87 80-bit on x86-64, not IEEE float128
#undef KINDLING_ARITH_NAME

KINDLING_API void encode_tensor(ByteWriter& out, const at::Tensor& tensor);
KINDLING_API at::Tensor decode_tensor(ByteReader& in);
}  // namespace detail

template <typename T>
struct Codec<T, std::enable_if_t<std::is_arithmetic<T>::value>> {
  static std::string name() { return detail::ArithmeticName<T>::get(); }
  static void encode(ByteWriter& out, const T& v) { out.pod(v); }
  static T decode(ByteReader& in) { return in.pod<T>(); }
};

template <>
struct Codec<std::string> {
  static std::string name() { return "string"; }
  static void encode(ByteWriter& out, const std::string& v) { out.string(v); }
  static std::string decode(ByteReader& in) { return in.string(); }
};

template <>
struct Codec<at::Tensor> {
  static std::string name() { return "tensor"; }
  static void encode(ByteWriter& out, const at::Tensor& v) { detail::encode_tensor(out, v); }
  static at::Tensor decode(ByteReader& in) { return detail::decode_tensor(in); }
};

template <typename T, typename A>
struct Codec<std::vector<T, A>> {
  static std::string name() { return "vector<" + Codec<T>::name() + ">"; }
  static void encode(ByteWriter& out, const std::vector<T, A>& v) {
    out.pod<std::uint64_t>(v.size());
    for (const auto& x : v) Codec<T>::encode(out, x);
  }
  static std::vector<T, A> decode(ByteReader& in) {
    auto n = in.pod<std::uint64_t>();
    std::vector<T, A> v;
    v.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 20)));
    for (std::uint64_t i = 0; i < n; ++i) v.push_back(Codec<T>::decode(in));
    return v;
  }
};

template <typename A, typename B>
struct Codec<std::pair<A, B>> {
  static std::string name() { return "pair<" + Codec<A>::name() + "," + Codec<B>::name() + ">"; }
  static void encode(ByteWriter& out, const std::pair<A, B>& v) {
    Codec<A>::encode(out, v.first);
    Codec<B>::encode(out, v.second);
  }
  static std::pair<A, B> decode(ByteReader& in) {
    A a = Codec<A>::decode(in);
    B b = Codec<B>::decode(in);
    return {std::move(a), std::move(b)};
  }
};

namespace detail {
template <typename M>
struct MapCodec {
  using K = typename M::key_type;
  using V = typename M::mapped_type;
  static void encode(ByteWriter& out, const M& m) {
    out.pod<std::uint64_t>(m.size());
    for (const auto& kv : m) {
      Codec<K>::encode(out, kv.first);
      Codec<V>::encode(out, kv.second);
    }
  }
  static M decode(ByteReader& in) {
    auto n = in.pod<std::uint64_t>();
    M m;
    for (std::uint64_t i = 0; i < n; ++i) {
      K k = Codec<K>::decode(in);
      m.emplace(std::move(k), Codec<V>::decode(in));
    }
    return m;
  }
};
}  // namespace detail

template <typename K, typename V, typename C, typename A>
struct Codec<std::map<K, V, C, A>> : detail::MapCodec<std::map<K, V, C, A>> {
  static std::string name() { return "map<" + Codec<K>::name() + "," + Codec<V>::name() + ">"; }
};

template <typename K, typename V, typename H, typename E, typename A>
struct Codec<std::unordered_map<K, V, H, E, A>> : detail::MapCodec<std::unordered_map<K, V, H, E, A>> {
  static std::string name() { return "unordered_map<" + Codec<K>::name() + "," + Codec<V>::name() + ">"; }
};

/// Encodes `value` with its type signature.
template <typename T>
std::string encode(const T& value) {
  ByteWriter out;
  out.string(Codec<T>::name());
  Codec<T>::encode(out, value);
  return std::move(out.bytes());
}

/// Decodes a value encoded by encode<T>. `sender` (a global rank, or -1) only improves
/// the error message. Throws kindling::UsageError when the sender encoded another type.
template <typename T>
T decode(const std::string& bytes, int sender = -1) {
  ByteReader in(bytes);
  const std::string sent = in.string();
  const std::string expected = Codec<T>::name();
  KINDLING_CHECK(sent == expected, "kindling::dist: type mismatch in an object collective: rank ", sender,
                 " sent a value of type '", sent, "' but this rank expects '", expected,
                 "'. Every rank must pass a value of the same C++ type.");
  T value = Codec<T>::decode(in);
  KINDLING_CHECK(in.done(), "kindling::dist deserialization: ", "trailing bytes after a value of type '", expected,
                 "' from rank ", sender);
  return value;
}

}  // namespace dist
}  // namespace kindling
