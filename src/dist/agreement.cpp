// What the ranks must agree on, checked once in initialize() (see agreement.h).
#include "dist/agreement.h"

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include <algorithm>
#include <map>

#include "common/env.h"
#include "dist/backends/c10d/c10d_backend.h"
#include "dist/diagnostics/fingerprint.h"
#include "kindling/config.h"
#include "kindling/error.h"
#include "kindling/log.h"

extern char** environ;

namespace kindling {
namespace dist {
namespace detail {
namespace {

using ::kindling::detail::get_env;

// kindling's own variables; KINDLING_RUN* and the relay flags are set by its launchers.
const char* const kKnown[] = {
    "KINDLING_LOG_LEVEL",       "KINDLING_STALL_TIMEOUT",     "KINDLING_DISTRIBUTED_DEBUG", "KINDLING_MPI_NO_SHM",
    "KINDLING_MPI_SHM_SEGMENT", "KINDLING_MPI_SHM_MIN_BYTES", "KINDLING_MPI_SHM_HEAP_MB",   "KINDLING_RUN",
    "KINDLING_RUN_ID",          "KINDLING_PARALLEL_CHILD",    "KINDLING_STDOUT_TERMINAL",   "KINDLING_STDERR_TERMINAL",
    "KINDLING_RUN_INSTANCE",    "KINDLING_FLIGHT_RECORDER",   "KINDLING_FLIGHT_RECORD_DIR",
    "KINDLING_OUTPUT_RANK_PREFIXED"};

// Edit distance, to tell a misspelt kindling variable from a program's own KINDLING_* names.
std::size_t distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

void check_int64(const char* name, long long minimum) {
  auto text = get_env(name);
  if (!text) return;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text->c_str(), &end, 10);
  KINDLING_CHECK(!text->empty() && *end == '\0' && errno == 0 && v >= minimum, name, "='", *text,
                 "' is not a whole number >= ", minimum, "; set it to such a number or unset it");
}

// (name, value) lines; a backend's own variables (mpi's shared-memory sizes) where it uses them.
std::string settings_text(const Runtime& rt) {
  std::string text = "backend\t" + rt.backend_name +
                     "\nkindling version\t" KINDLING_VERSION_STRING "\nLibTorch version\t" TORCH_VERSION
                     "\ncollective fingerprints (KINDLING_DISTRIBUTED_DEBUG or "
                     "TORCH_DISTRIBUTED_DEBUG)\t" +
                     std::string(fingerprints_enabled() ? "DETAIL" : "off") + "\n";
  if (rt.traits != nullptr) {
    for (const std::string& name : rt.traits->agreed_variables)
      text += name + "\t" + get_env(name).value_or("(unset)") + "\n";
  }
  return text;
}

std::map<std::string, std::string> parse_settings(const std::string& text) {
  std::map<std::string, std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    const std::size_t tab = line.find('\t');
    if (tab != std::string::npos) out[line.substr(0, tab)] = line.substr(tab + 1);
    start = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

// An all_gather of fixed-size blocks straight on the world's engine (no fingerprints, no
// stall accounting: those are among the settings being checked).
std::vector<std::optional<std::string>> gather_on_engine(Runtime& rt, const std::string& mine) {
  constexpr int64_t kBlock = 4096;
  KINDLING_INTERNAL_ASSERT(static_cast<int64_t>(mine.size()) < kBlock, "settings of ", mine.size(), " bytes");
  at::Tensor in = at::zeros({kBlock}, at::kByte);
  std::copy(mine.begin(), mine.end(), in.data_ptr<uint8_t>());
  at::Tensor all = at::zeros({rt.world_size, kBlock}, at::kByte);
  std::vector<at::Tensor> outs;
  for (int r = 0; r < rt.world_size; ++r) outs.push_back(all[r]);
  try {
    rt.world->comm->all_gather(outs, in)->wait(rt.world->timeout);
  } catch (const std::exception& e) {
    throw CommunicationError(
        ::kindling::detail::rank_prefix() +
        "kindling::dist::initialize: the ranks' settings could not be exchanged: " + engine_message(e));
  }
  std::vector<std::optional<std::string>> out;
  for (int r = 0; r < rt.world_size; ++r) out.emplace_back(reinterpret_cast<const char*>(all[r].data_ptr<uint8_t>()));
  return out;
}

}  // namespace

void validate_kindling_environment() {
  (void)log_level();  // throws for a KINDLING_LOG_LEVEL it does not know
  if (auto debug = get_env("KINDLING_DISTRIBUTED_DEBUG")) {
    KINDLING_CHECK(*debug == "OFF" || *debug == "INFO" || *debug == "DETAIL", "KINDLING_DISTRIBUTED_DEBUG='", *debug,
                   "' is not one of OFF, INFO, DETAIL (torch's TORCH_DISTRIBUTED_DEBUG values; DETAIL checks every "
                   "collective's fingerprint)");
  }
  check_int64("KINDLING_MPI_SHM_SEGMENT", 4096);
  check_int64("KINDLING_MPI_SHM_MIN_BYTES", 0);
  check_int64("KINDLING_MPI_SHM_HEAP_MB", 0);
  check_int64("KINDLING_FLIGHT_RECORDER", 0);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (name.rfind("KINDLING_", 0) != 0) continue;
    const char* closest = nullptr;
    std::size_t best = 3;  // at most 2 edits away: a misspelling, not a program's own variable
    for (const char* known : kKnown) {
      const std::size_t d = distance(name, known);
      if (d == 0) {
        closest = nullptr;
        break;
      }
      if (d < best) best = d, closest = known;
    }
    if (closest != nullptr)
      log(LogLevel::kWarning, "kindling::dist::initialize: warning: " + name +
                                  " is not a kindling variable and "
                                  "has no effect; did you mean " +
                                  closest + "?");
  }
}

std::vector<std::optional<std::string>> exchange(Runtime& rt, const std::string& topic, const std::string& mine) {
  if (rt.external_pg) return {};
  auto store = rt.backend ? rt.backend->store() : c10::intrusive_ptr<c10d::Store>();
  if (!store) return gather_on_engine(rt, mine);
  // The kindling ranks announced themselves while the world was created (joined_key); a
  // plain torch.distributed peer did not, writes nothing, and is not waited for.
  std::vector<std::optional<std::string>> out(static_cast<std::size_t>(rt.world_size));
  const std::string prefix = "kindling/" + topic + "/";
  store->set(prefix + std::to_string(rt.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  try {
    for (int r = 0; r < rt.world_size; ++r) {
      if (r != rt.rank && !store->check({joined_key(0, r)})) continue;
      const std::string key = prefix + std::to_string(r);
      store->wait({key}, rt.world->timeout);
      const auto raw = store->get(key);
      out[static_cast<std::size_t>(r)] = std::string(raw.begin(), raw.end());
    }
  } catch (const std::exception& e) {
    throw TimeoutError(::kindling::detail::rank_prefix() + "kindling::dist::initialize: the ranks' " + topic +
                       " could not be exchanged through the rendezvous store: " + engine_message(e) +
                       ". Check that every rank started");
  }
  return out;
}

void check_settings_agree(Runtime& rt) {
  const auto all = exchange(rt, "settings", settings_text(rt));
  // setting -> value -> ranks
  std::map<std::string, std::map<std::string, std::vector<int>>> seen;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (!all[r]) continue;
    for (const auto& [name, value] : parse_settings(*all[r])) seen[name][value].push_back(static_cast<int>(r));
  }
  std::string differences;
  for (const auto& [name, values] : seen) {
    if (values.size() < 2) continue;
    differences += (differences.empty() ? "" : "; ") + name + ":";
    const char* separator = " ";
    for (const auto& [value, ranks] : values) {
      differences.append(separator).append("'").append(value).append(ranks.size() > 1 ? "' on ranks " : "' on rank ");
      separator = ", ";
      for (std::size_t i = 0; i < ranks.size(); ++i) differences.append(i ? "," : "").append(std::to_string(ranks[i]));
    }
  }
  KINDLING_CHECK(differences.empty(),
                 "kindling::dist::initialize: the ranks disagree on settings that must be the same "
                 "on every rank (they would wait for each other at the first collective until the timeout): ",
                 differences,
                 ". Start every rank with the same program, backend and KINDLING_* / "
                 "TORCH_DISTRIBUTED_DEBUG environment");
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
