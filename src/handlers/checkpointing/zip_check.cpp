// A checkpoint's archive checked against its own records before LibTorch's reader reads it
// (Checkpoint::archive_damage, checkpoint.h): what a resume must be able to trust.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "kindling/handlers/checkpointing/checkpoint.h"

namespace kindling {
namespace handlers {

// A torch.save file is a zip archive written by torch's PyTorchStreamWriter (the same in
// LibTorch and in Python): its entries stored uncompressed, the CRC-32 of each entry's data
// recorded in the entry's local header and in the central directory, which the
// end-of-archive record at the file's end locates. LibTorch's reader is built without
// miniz's CRC checks (MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS), so a damaged tensor would load
// as other numbers: these checks stand in for them, on the file's own records, so that a
// file Python's torch.save wrote is checked alike and no file of another format is needed.
// Not covered: bytes no reader uses (alignment padding in the local headers' extra fields,
// times, version fields), and the data of an entry whose recorded CRC-32 is 0 (Python's
// torch.save after torch.serialization.set_crc32_options(False) records none).
namespace {

using Bytes = std::vector<char>;

constexpr std::uint64_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEndRecord = 0x06054b50,
                        kEndRecord64 = 0x06064b50, kEndLocator64 = 0x07064b50, kFull32 = 0xffffffffu;

// The `n`-byte little-endian number at `at` (the caller checked the bounds).
std::uint64_t number_at(const Bytes& b, std::uint64_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

std::string hex32(std::uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%08llx", static_cast<unsigned long long>(v));
  return text;
}

std::uint32_t crc32_of(const char* data, std::uint64_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {  // zlib takes at most an uInt at a time
    const auto n = static_cast<uInt>(std::min<std::uint64_t>(size, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data), n);
    data += n;
    size -= n;
  }
  return static_cast<std::uint32_t>(crc);
}

// Where the end records put the central directory; `end`: where the end records begin.
struct Directory {
  std::uint64_t offset = 0, size = 0, entries = 0, end = 0;
};

// Finds the end-of-archive record that ends the file (and zip64's, when there): "" and `d`
// filled, or what is wrong.
std::string find_directory(const Bytes& b, Directory& d) {
  const std::uint64_t n = b.size();
  const std::string incomplete =
      "no end-of-archive record ends the file, so it is an incomplete torch.save archive (truncated or corrupt: the "
      "copy or the save was cut short, or the file's end was overwritten)";
  if (n < 22) return incomplete;
  const std::uint64_t lowest = n > 22 + 0xffffu ? n - 22 - 0xffffu : 0;  // the record's comment is 64 KiB at most
  std::uint64_t at = n - 22;
  while (!(number_at(b, at, 4) == kEndRecord && at + 22 + number_at(b, at + 20, 2) == n)) {
    if (at-- == lowest) return incomplete;
  }
  d = {number_at(b, at + 16, 4), number_at(b, at + 12, 4), number_at(b, at + 10, 2), at};
  if (at >= 20 && number_at(b, at - 20, 4) == kEndLocator64) {
    const std::uint64_t z = number_at(b, at - 12, 8);
    if (z > at - 20 || at - 20 - z < 56 || number_at(b, z, 4) != kEndRecord64)
      return "the zip64 end-of-archive record is not at offset " + std::to_string(z) + ", where its locator says";
    d = {number_at(b, z + 48, 8), number_at(b, z + 40, 8), number_at(b, z + 32, 8), z};
  }
  if (d.offset > d.end || d.size > d.end - d.offset)
    return "the central directory (" + std::to_string(d.size) + " bytes from offset " + std::to_string(d.offset) +
           ") does not lie before the end-of-archive record at offset " + std::to_string(d.end);
  return "";
}

// One entry as the central directory describes it.
struct Entry {
  std::string name;
  std::uint64_t flags = 0, method = 0, crc = 0, compressed = 0, uncompressed = 0, local = 0;
};

// Reads the central directory's entry number `index` at `at` and moves `at` past it: "" or
// what is wrong.
std::string read_entry(const Bytes& b, const Directory& d, std::uint64_t index, std::uint64_t& at, Entry& e) {
  const std::uint64_t stop = d.offset + d.size;
  const std::string which = "entry " + std::to_string(index + 1) + " of " + std::to_string(d.entries) +
                            " of the central directory (offset " + std::to_string(at) + ")";
  if (at + 46 > stop || number_at(b, at, 4) != kCentralHeader) return which + " is not a zip header";
  e = {"",
       number_at(b, at + 8, 2),
       number_at(b, at + 10, 2),
       number_at(b, at + 16, 4),
       number_at(b, at + 20, 4),
       number_at(b, at + 24, 4),
       number_at(b, at + 42, 4)};
  const std::uint64_t name = number_at(b, at + 28, 2), extra = number_at(b, at + 30, 2);
  const std::uint64_t length = 46 + name + extra + number_at(b, at + 32, 2);
  if (at + length > stop) return which + " runs past the directory's end";
  e.name.assign(&b[at + 46], name);
  // zip64: 64-bit values for the fields that hold 0xffffffff, in this order.
  for (std::uint64_t x = at + 46 + name, x_end = x + extra; x + 4 <= x_end;) {
    const std::uint64_t id = number_at(b, x, 2), size = number_at(b, x + 2, 2);
    if (x + 4 + size > x_end) return which + " has an extra field that runs past its end";
    std::uint64_t f = x + 4;
    for (std::uint64_t* field : {&e.uncompressed, &e.compressed, &e.local}) {
      if (id != 1 || *field != kFull32) continue;
      if (f + 8 > x + 4 + size) return which + " has a zip64 field too short for its sizes";
      *field = number_at(b, f, 8);
      f += 8;
    }
    x += 4 + size;
  }
  at += length;
  return "";
}

// The entry's local header and data, and the CRC-32 of its data: "" or what is wrong.
std::string check_entry(const Bytes& b, const Directory& d, const Entry& e) {
  const std::string what = "'" + e.name + "'";
  if (e.local > d.offset || d.offset - e.local < 30 || number_at(b, e.local, 4) != kLocalHeader)
    return "the local header of " + what + " at offset " + std::to_string(e.local) + " is not a zip header";
  const std::uint64_t name = number_at(b, e.local + 26, 2);
  const std::uint64_t data = e.local + 30 + name + number_at(b, e.local + 28, 2);
  if (data > d.offset || e.compressed > d.offset - data)
    return "the data of " + what + " (" + std::to_string(e.compressed) + " bytes from offset " + std::to_string(data) +
           ") would run into the central directory at offset " + std::to_string(d.offset);
  const std::string local_name(&b[e.local + 30], name);
  if (local_name != e.name)
    return "the local header at offset " + std::to_string(e.local) + " names '" + local_name +
           "' where the central directory names " + what;
  const std::uint64_t local_crc = number_at(b, e.local + 14, 4);
  if ((e.flags & 8) == 0 && local_crc != e.crc)  // bit 3: the CRC follows the data instead
    return "the local header of " + what + " records the CRC-32 " + hex32(local_crc) + ", the central directory " +
           hex32(e.crc);
  if (e.method != 0) return "";  // compressed by another tool: its CRC covers the inflated bytes
  // torch.save after torch.serialization.set_crc32_options(False) records 0: nothing to compare.
  if (e.crc == 0) return "";
  if (e.compressed != e.uncompressed)
    return "the stored entry " + what + " has " + std::to_string(e.compressed) + " bytes in the archive but " +
           std::to_string(e.uncompressed) + " when read";
  const std::uint32_t crc = crc32_of(b.data() + data, e.compressed);
  if (crc != e.crc)
    return "the CRC-32 of " + what + " (" + std::to_string(e.compressed) + " bytes from offset " +
           std::to_string(data) + ") is " + hex32(crc) + ", not the " + hex32(e.crc) + " recorded when it was saved";
  return "";
}

}  // namespace

std::optional<std::string> Checkpoint::archive_damage(const std::vector<char>& bytes) {
  Directory d;
  std::string wrong = find_directory(bytes, d);
  const bool zip_start = bytes.size() >= 4 && number_at(bytes, 0, 4) == kLocalHeader;
  if (!wrong.empty()) return zip_start ? std::optional<std::string>(wrong) : std::nullopt;
  std::uint64_t at = d.offset;
  for (std::uint64_t i = 0; i < d.entries; ++i) {
    Entry e;
    if (!(wrong = read_entry(bytes, d, i, at, e)).empty() || !(wrong = check_entry(bytes, d, e)).empty()) return wrong;
  }
  if (d.entries == 0) return std::string("the central directory lists no entry");
  if (at != d.offset + d.size)
    return "the central directory holds more than the " + std::to_string(d.entries) + " entries its end record counts";
  return std::string();
}

}  // namespace handlers
}  // namespace kindling
