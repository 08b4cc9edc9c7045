// Python pickle writer, protocol 2 (pickle.h). Opcodes: Python's Lib/pickletools.py.
#include "common/pickle.h"

#include <cstring>
#include <limits>
#include <stdexcept>

namespace kindling {
namespace detail {
namespace {
constexpr char kProto = '\x80';
constexpr char kEmptyDict = '}';
constexpr char kEmptyList = ']';
constexpr char kMark = '(';
constexpr char kSetItems = 'u';
constexpr char kAppends = 'e';
constexpr char kTuple2 = '\x86';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kBinFloat = 'G';
constexpr char kNone = 'N';
constexpr char kTrue = '\x88';
constexpr char kFalse = '\x89';
constexpr char kStop = '.';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';

// `bytes` bytes of `value`, least significant first (two's complement for negatives).
void append_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
}  // namespace

PickleWriter::PickleWriter() {
  out_.push_back(kProto);
  out_.push_back('\x02');
}

void PickleWriter::begin_dict() {
  out_.push_back(kEmptyDict);
  out_.push_back(kMark);
}

void PickleWriter::end_dict() { out_.push_back(kSetItems); }

void PickleWriter::begin_list() {
  out_.push_back(kEmptyList);
  out_.push_back(kMark);
}

void PickleWriter::end_list() { out_.push_back(kAppends); }

void PickleWriter::pair() { out_.push_back(kTuple2); }

void PickleWriter::text(const std::string& value) {
  out_.push_back(kBinUnicode);
  append_little_endian(out_, value.size(), 4);
  out_ += value;
}

void PickleWriter::integer(int64_t value) {
  if (value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max()) {
    out_.push_back(kBinInt);
    append_little_endian(out_, static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
    return;
  }
  out_.push_back(kLong1);
  out_.push_back('\x08');
  append_little_endian(out_, static_cast<uint64_t>(value), 8);
}

void PickleWriter::real(double value) {
  uint64_t bits = 0;
  static_assert(sizeof bits == sizeof value, "IEEE-754 double expected");
  std::memcpy(&bits, &value, sizeof bits);
  out_.push_back(kBinFloat);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));  // big-endian
}

void PickleWriter::boolean(bool value) { out_.push_back(value ? kTrue : kFalse); }

void PickleWriter::none() { out_.push_back(kNone); }

std::string PickleWriter::finish() {
  out_.push_back(kStop);
  return std::move(out_);
}

const PickleValue* PickleValue::get(const std::string& key) const {
  if (kind != Kind::kDict) return nullptr;
  for (const auto& entry : entries)
    if (entry.first.kind == Kind::kText && entry.first.text == key) return &entry.second;
  return nullptr;
}

namespace {

// The reader's state: the stream, where it is, and pickle's stack (a mark is a kNone value
// with `integer` set to -1, which no None read from the stream has).
class PickleReader {
 public:
  explicit PickleReader(const std::string& bytes) : in_(bytes) {}

  PickleValue run() {
    if (take(2) != std::string("\x80\x02", 2)) fail("not a protocol 2 pickle");
    for (;;) {
      const char op = take(1)[0];
      if (op == kStop) break;
      step(op);
    }
    if (stack_.size() != 1) fail("the stream left " + std::to_string(stack_.size()) + " values");
    return std::move(stack_.back());
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("pickle at byte " + std::to_string(at_) + ": " + what);
  }

  std::string take(std::size_t n) {
    if (in_.size() - at_ < n) fail("the stream ends early");
    at_ += n;
    return in_.substr(at_ - n, n);
  }

  uint64_t little_endian(std::size_t n) {
    const std::string b = take(n);
    uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
    return v;
  }

  static PickleValue of(PickleValue::Kind kind) {
    PickleValue v;
    v.kind = kind;
    return v;
  }

  // The values above the last mark, removed from the stack (the mark too).
  std::vector<PickleValue> since_mark() {
    std::size_t m = stack_.size();
    while (m > 0 && !(stack_[m - 1].kind == PickleValue::Kind::kNone && stack_[m - 1].integer == -1)) --m;
    if (m == 0) fail("no mark");
    std::vector<PickleValue> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                                   std::make_move_iterator(stack_.end()));
    stack_.resize(m - 1);
    return items;
  }

  PickleValue& top(PickleValue::Kind kind) {
    if (stack_.empty() || stack_.back().kind != kind) fail("the value below the mark has the wrong type");
    return stack_.back();
  }

  void step(char op);

  const std::string& in_;
  std::size_t at_ = 0;
  std::vector<PickleValue> stack_;
};

void PickleReader::step(char op) {
  using Kind = PickleValue::Kind;
  PickleValue v;
  switch (op) {
    case kEmptyDict: stack_.push_back(of(Kind::kDict)); return;
    case kEmptyList: stack_.push_back(of(Kind::kList)); return;
    case kMark: v.integer = -1; stack_.push_back(v); return;
    case kNone: stack_.push_back(of(Kind::kNone)); return;
    case kTrue: case kFalse: v.kind = Kind::kBool; v.boolean = op == kTrue; stack_.push_back(v); return;
    case kBinInt1: v.kind = Kind::kInt; v.integer = static_cast<int64_t>(little_endian(1)); break;
    case kBinInt2: v.kind = Kind::kInt; v.integer = static_cast<int64_t>(little_endian(2)); break;
    case kBinInt: v.kind = Kind::kInt; v.integer = static_cast<int32_t>(static_cast<uint32_t>(little_endian(4))); break;
    case kLong1: {
      const std::size_t n = static_cast<unsigned char>(take(1)[0]);
      if (n > 8) fail("an integer of " + std::to_string(n) + " bytes");
      uint64_t raw = little_endian(n);
      if (n > 0 && n < 8 && (raw >> (8 * n - 1)) != 0) raw |= ~uint64_t{0} << (8 * n);  // sign
      v.kind = Kind::kInt;
      v.integer = static_cast<int64_t>(raw);
      break;
    }
    case kBinFloat: {
      uint64_t bits = 0;
      for (char c : take(8)) bits = (bits << 8) | static_cast<unsigned char>(c);
      v.kind = Kind::kReal;
      std::memcpy(&v.real, &bits, sizeof bits);
      break;
    }
    case kBinUnicode: v.kind = Kind::kText; v.text = take(static_cast<std::size_t>(little_endian(4))); break;
    case kTuple2: {
      if (stack_.size() < 2) fail("a pair of fewer than two values");
      v.kind = Kind::kTuple;
      v.items.assign(std::make_move_iterator(stack_.end() - 2), std::make_move_iterator(stack_.end()));
      stack_.resize(stack_.size() - 2);
      break;
    }
    case kAppends: {
      auto items = since_mark();
      auto& list = top(Kind::kList).items;
      list.insert(list.end(), std::make_move_iterator(items.begin()), std::make_move_iterator(items.end()));
      return;
    }
    case kSetItems: {
      auto items = since_mark();
      if (items.size() % 2 != 0) fail("a dict with a key and no value");
      auto& dict = top(Kind::kDict).entries;
      for (std::size_t i = 0; i < items.size(); i += 2) dict.emplace_back(std::move(items[i]), std::move(items[i + 1]));
      return;
    }
    default: fail("opcode 0x" + [&] {
      const char* hex = "0123456789abcdef";
      const auto c = static_cast<unsigned char>(op);
      return std::string{hex[c >> 4], hex[c & 15]};
    }() + " is not one kindling reads");
  }
  stack_.push_back(std::move(v));
}

}  // namespace

PickleValue read_pickle(const std::string& bytes) { return PickleReader(bytes).run(); }

}  // namespace detail
}  // namespace kindling
