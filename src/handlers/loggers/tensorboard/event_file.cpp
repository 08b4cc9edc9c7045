// The TensorBoard event file format written by hand (see event_file.h for why).
#include "handlers/loggers/tensorboard/event_file.h"

#include <array>
#include <chrono>
#include <cstring>

#include "common/identity.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {
namespace detail {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// Little-endian whatever the host's byte order (protobuf's fixed types and TFRecord's header).
void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(out, field, kFixed64);
  put_fixed64(out, bits);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(out, field, kFixed32);
  put_fixed32(out, bits);
}

// Event's fields.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
// Summary's repeated value, and Summary.Value's fields.
constexpr uint32_t kSummaryValue = 1, kValueTag = 1, kValueSimpleValue = 2, kValueHisto = 5;
// HistogramProto's fields.
constexpr uint32_t kHistoMin = 1, kHistoMax = 2, kHistoNum = 3, kHistoSum = 4, kHistoSumSquares = 5,
                   kHistoBucketLimit = 6, kHistoBucket = 7;

// A packed repeated double field (proto3's default for repeated scalars, and [packed = true]
// in summary.proto).
void put_packed_doubles(std::string& out, uint32_t field, const std::vector<double>& values) {
  std::string packed;
  packed.reserve(values.size() * 8);
  for (double v : values) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    put_fixed64(packed, bits);
  }
  put_bytes(out, field, packed);
}

// Event{wall_time, step, summary{value}} around one encoded Summary.Value.
std::string summary_event(double wall_time, int64_t step, const std::string& summary_value) {
  std::string summary;
  put_bytes(summary, kSummaryValue, summary_value);
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_key(event, kEventStep, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64: two's complement, 10 bytes when negative
  put_bytes(event, kEventSummary, summary);
  return event;
}

const std::array<uint32_t, 256>& crc32c_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

}  // namespace

uint32_t crc32c(const char* data, std::size_t size) {
  const auto& table = crc32c_table();
  uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ static_cast<uint8_t>(data[i])) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const char* data, std::size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string tfrecord(const std::string& data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_fixed64(record, data.size());
  put_fixed32(record, masked_crc32c(record.data(), 8));
  record += data;
  put_fixed32(record, masked_crc32c(data.data(), data.size()));
  return record;
}

std::string file_version_event(double wall_time) {
  std::string event;
  put_double(event, kEventWallTime, wall_time);
  put_bytes(event, kEventFileVersion, "brain.Event:2");
  return event;
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string summary_value;
  put_bytes(summary_value, kValueTag, tag);
  put_float(summary_value, kValueSimpleValue, value);
  return summary_event(wall_time, step, summary_value);
}

std::string histogram_event(double wall_time, int64_t step, const std::string& tag, const HistogramSummary& h) {
  std::string histo;
  put_double(histo, kHistoMin, h.min);
  put_double(histo, kHistoMax, h.max);
  put_double(histo, kHistoNum, h.num);
  put_double(histo, kHistoSum, h.sum);
  put_double(histo, kHistoSumSquares, h.sum_squares);
  put_packed_doubles(histo, kHistoBucketLimit, h.bucket_limit);
  put_packed_doubles(histo, kHistoBucket, h.bucket);
  std::string summary_value;
  put_bytes(summary_value, kValueTag, tag);
  put_bytes(summary_value, kValueHisto, histo);
  return summary_event(wall_time, step, summary_value);
}

void ClosedSinkWarning::dropped(const std::string& who, const std::string& tag) {
  if (told_.exchange(true)) return;
  kindling::log(LogLevel::kWarning,
                who + ": '" + tag +
                    "' was logged after close() (or after the logger was destroyed) and is dropped, as is every "
                    "later value (told once); keep the logger until the last run ends (also the one "
                    "setup_tb_logging returns), or remove its handlers first with the HandlerHandle that attach_* "
                    "returned");
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

int this_rank() {
  // is_initialized() first: it adopts a process group given to use_process_group, whose rank
  // then counts; process_rank() is the distributed model's rank, else the launcher's, else 0.
  (void)dist::is_initialized();
  return kindling::detail::process_rank();
}

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
