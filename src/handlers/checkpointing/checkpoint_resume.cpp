// Checkpoint across a resume: the files an earlier attempt of the run wrote with this
// checkpoint's file name pattern count towards n_saved (checkpoint.h); and what a resume
// must be able to trust, a file that is the one that was saved: its archive checked against
// the CRC-32s the writer recorded (verify_bytes), and the newest intact file found
// (find_latest_intact).
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "common/files.h"
#include "kindling/dist/dist.h"
#include "kindling/handlers/checkpointing/checkpoint.h"
#include "kindling/log.h"

namespace kindling {
namespace handlers {

namespace {

std::string regex_escape(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

}  // namespace

std::vector<Checkpoint::Item> Checkpoint::earlier_files() const {
  const bool with_score = static_cast<bool>(options_.score_function()) || options_.score_name().has_value();
  const bool with_step = static_cast<bool>(options_.global_step_transform()) || !with_score;
  const std::string pattern = file_pattern(with_step);
  // The pattern as a regular expression: fixed fields literally, the step and score captured.
  const std::vector<std::pair<std::string, std::string>> fixed{{"{filename_prefix}", options_.filename_prefix()},
                                                               {"{name}", object_name()},
                                                               {"{score_name}", options_.score_name().value_or("")},
                                                               {"{ext}", "pt"}};
  std::string expression;
  int groups = 0, step_group = 0, score_group = 0;
  for (std::size_t i = 0; i < pattern.size();) {
    bool field = false;
    for (const auto& [key, value] : fixed) {
      if (pattern.compare(i, key.size(), key) != 0) continue;
      expression += regex_escape(value);
      i += key.size();
      field = true;
    }
    if (field) continue;
    if (pattern.compare(i, 13, "{global_step}") == 0) {
      expression += "([0-9]+)";
      step_group = ++groups;
      i += 13;
    } else if (pattern.compare(i, 7, "{score}") == 0) {
      expression += "(-?[0-9]+(?:\\.[0-9]+)?)";
      score_group = ++groups;
      i += 7;
    } else {
      expression += regex_escape(pattern.substr(i++, 1));
    }
  }
  const int rank_by = with_score ? score_group : step_group;
  std::vector<Item> found;
  if (rank_by == 0 || !::kindling::detail::is_directory(saver_->dirname())) return found;  // nothing to rank by
  const std::regex names(expression);
  for (const auto& name : ::kindling::detail::list_directory(saver_->dirname())) {
    std::smatch m;
    if (!std::regex_match(name, m, names)) continue;
    if (!::kindling::detail::is_regular_file(::kindling::detail::join_path(saver_->dirname(), name))) continue;
    found.push_back({std::stod(m[rank_by].str()), name});
  }
  std::stable_sort(found.begin(), found.end(), [](const Item& a, const Item& b) { return a.priority < b.priority; });
  return found;
}

void Checkpoint::adopt_earlier_files(engine::Engine& engine) {
  if (!saved_.empty() || engine.state().iteration == 0) return;
  const int src = saver_->options().save_on_rank();
  std::string listed;  // "<priority>\t<file>\n" per file, made on the saver's rank
  if (saver_->saves_here()) {
    for (const auto& item : earlier_files()) {
      char priority[40];
      std::snprintf(priority, sizeof(priority), "%.17g", item.priority);
      listed += std::string(priority) + "\t" + item.filename + "\n";
    }
  }
  // Every rank must decide alike what to keep (a metric's state_dict is collective).
  if (dist::get_world_size() > 1) listed = dist::broadcast(listed, src);
  std::istringstream in(listed);
  std::string line, names;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    saved_.push_back({std::stod(line.substr(0, tab)), line.substr(tab + 1)});
    names += (names.empty() ? "" : ", ") + line.substr(tab + 1);
  }
  if (!saved_.empty() && saver_->saves_here())
    log(LogLevel::kInfo,
        "kindling::handlers::Checkpoint: resumed at iteration " + std::to_string(engine.state().iteration) + "; the " +
            std::to_string(saved_.size()) + " earlier file(s) of this checkpoint in " + saver_->dirname() +
            " count towards n_saved (" +
            (options_.n_saved() ? std::to_string(*options_.n_saved()) : std::string("all")) + "): " + names);
}

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

void Checkpoint::refuse_damaged(const std::string& path, std::size_t size, const std::string& what) {
  KINDLING_CHECK_T(DamagedCheckpointError, false, "kindling::handlers::Checkpoint: '", path, "' (", size,
                   " bytes) is damaged: ", what,
                   ". Its bytes are not those that were saved (a disk, copy or transfer error, or something wrote into "
                   "it); resume from an earlier checkpoint (Checkpoint::find_latest_intact skips damaged files), or "
                   "copy this one again from an intact source");
}

std::vector<char> Checkpoint::read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KINDLING_CHECK_T(Error, in.good(), "kindling::handlers::Checkpoint: cannot open '", path,
                   "': no such file or it is not readable");
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::optional<std::string> Checkpoint::find_latest_intact(const std::string& dirname,
                                                          const std::string& filename_prefix) {
  std::string damaged;
  for (const auto& path : newest_first(dirname, filename_prefix)) {
    std::string wrong;
    try {
      const std::vector<char> bytes = read_bytes(path);
      wrong = archive_damage(bytes).value_or(
          "not a torch.save archive (no zip header at its start, no end-of-archive record at its end)");
    } catch (const Error& e) {
      wrong = e.what();
    }
    if (wrong.empty()) {
      if (!damaged.empty())
        log(LogLevel::kWarning, "kindling::handlers::Checkpoint: resuming from '" + path +
                                    "', the newest intact checkpoint; skipped as damaged: " + damaged);
      return path;
    }
    damaged += (damaged.empty() ? "" : "; ") + ("'" + path + "' (" + wrong + ")");
  }
  KINDLING_CHECK_T(DamagedCheckpointError, damaged.empty(),
                   "kindling::handlers::Checkpoint::find_latest_intact: "
                   "every checkpoint in '",
                   dirname, "' is damaged: ", damaged,
                   ". Nothing to resume from; they are left as they are: copy intact ones there, or move them away "
                   "to start afresh");
  return std::nullopt;
}

}  // namespace handlers
}  // namespace kindling
