#pragma once
// Python pickles (protocol 2) of plain data: dicts, lists, pairs, strings, integers, floats,
// booleans and None. The writer takes them in order as a stream of calls:
//   PickleWriter w; w.begin_dict(); w.text("version"); w.text("2.10"); w.end_dict();
//   std::string bytes = w.finish();
// and read_pickle reads such a stream back (kindling-run reads the flight recorder's files).
// Hand-written because no packaged C++ library reads or writes pickles, and LibTorch's own
// pickler is an internal class whose constructor differs between LibTorch 1.13 and 2.x (and
// kindling-run does not load LibTorch). Only the opcodes Python's pickle and torch's own
// pickler use for these types, no memo. Plain C++: also in kindling_supervisor.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kindling {
namespace detail {

class PickleWriter {
 public:
  /// Starts the stream (the protocol 2 header).
  PickleWriter();

  /// A dict: its keys and values follow, alternating, until end_dict().
  void begin_dict();
  void end_dict();
  /// A list: its items follow until end_list().
  void begin_list();
  void end_list();
  /// Makes a tuple of the two values written last.
  void pair();

  void text(const std::string& value);
  void integer(int64_t value);
  void real(double value);
  void boolean(bool value);
  void none();

  /// Ends the stream and returns its bytes; the writer must not be used afterwards.
  std::string finish();

 private:
  std::string out_;
};

/// One value read back by read_pickle.
struct PickleValue {
  enum class Kind { kNone, kBool, kInt, kReal, kText, kList, kTuple, kDict };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<PickleValue> items;                            // list and tuple
  std::vector<std::pair<PickleValue, PickleValue>> entries;  // dict, in the stream's order

  /// The value of text key `key` in a dict; null when this is no dict or has no such key.
  const PickleValue* get(const std::string& key) const;
};

/// Reads a pickle of the types above (as PickleWriter writes them). Throws
/// std::runtime_error naming the offset for an opcode outside that set or a cut stream.
PickleValue read_pickle(const std::string& bytes);

}  // namespace detail
}  // namespace kindling
