#pragma once
// Internal to kindling's handlers: the TensorBoard event file format (TFRecord framing with
// masked CRC32C, and the few fields of TensorFlow's Event / Summary protobuf messages that
// scalars need), and what the TensorBoard and JSON loggers share (the rank they go by, the
// time). File helpers: src/common/files.h.
//
// Why the protobuf wire format is written by hand: Debian ships libprotobuf, but the
// Event and Summary .proto definitions belong to TensorFlow (tensorflow/core/util/event.proto,
// tensorflow/core/framework/summary.proto). Using libprotobuf would mean vendoring those
// .proto files, running protoc in the build and linking one more library, all for five
// fields: Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary)}, Summary{value = 1 (repeated Value)}, Value{tag = 1 (string),
// simple_value = 2 (float), histo = 5 (HistogramProto)}, HistogramProto{min = 1, max = 2,
// num = 3, sum = 4, sum_squares = 5 (doubles), bucket_limit = 6, bucket = 7 (packed
// repeated doubles)}. Their encoding is a few dozen lines (event_file.cpp), and the
// tests decode the result with the real protobuf runtime (tests/handlers/read_tfevents.py).
//
// Why CRC32C is computed here: zlib (already linked) offers crc32, whose polynomial is
// IEEE 802.3's (0xEDB88320 reflected), not Castagnoli's (0x82F63B78 reflected) that TFRecord
// uses; zlib has no CRC32C.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "handlers/loggers/json_text.h"

namespace kindling {
namespace handlers {
namespace detail {

/// CRC32C (Castagnoli) of `size` bytes, as in RFC 3720 (crc32c("123456789") == 0xE3069283).
uint32_t crc32c(const char* data, std::size_t size);
/// TFRecord's masked CRC32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const char* data, std::size_t size);
/// One TFRecord: uint64 length (little-endian), masked CRC32C of those 8 bytes, the data,
/// masked CRC32C of the data.
std::string tfrecord(const std::string& data);

/// The encoded Event{wall_time, file_version: "brain.Event:2"} that starts every event file.
std::string file_version_event(double wall_time);
/// The encoded Event{wall_time, step, summary{value{tag, simple_value}}}.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

/// TensorFlow's HistogramProto: bucket i counts the values in [bucket_limit[i-1],
/// bucket_limit[i]) (TensorFlow's Histogram::Add), the first bucket those from `min`;
/// add_histogram's last bucket also holds its upper edge, `max` (numpy.histogram's rule).
struct HistogramSummary {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};
/// The encoded Event{wall_time, step, summary{value{tag, histo}}}.
std::string histogram_event(double wall_time, int64_t step, const std::string& tag, const HistogramSummary& histogram);

/// What every logger's sink (TensorBoard file, JSON lines, HTML report) does with a value
/// logged after close(): it drops it, and the first one is told as a warning in kindling's
/// log. Not an exception: sinks exist on rank 0 only, so a throw would end rank 0 alone while
/// the other ranks' inert handlers go on to their next collective and wait there forever.
/// Thread-safe.
class ClosedSinkWarning {
 public:
  /// Warns for the first call only. `who` names the logger ("kindling::handlers::JsonLogger"),
  /// `tag` the value dropped.
  void dropped(const std::string& who, const std::string& tag);

 private:
  std::atomic<bool> told_{false};
};

/// Seconds since the Unix epoch, with the clock's resolution.
double wall_time_now();

/// The rank the loggers go by (who writes TensorBoard, JSON and HTML files, and setup_logger's
/// default): common/identity.h's process_rank(), i.e. kindling::dist::get_rank() once the
/// distributed model is initialized, else the launcher's variables by
/// detect_launch_environment's precedence (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, ...),
/// else 0. Throws kindling::UsageError, naming them, when the launcher's variables are
/// inconsistent (a RANK that is not an integer, RANK without WORLD_SIZE, ...). Every rank.
int this_rank();

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
