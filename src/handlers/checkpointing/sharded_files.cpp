// Sharded checkpoint files (kindling/handlers/checkpointing/sharded_files.h): every rank's part
// written at once, the marker after, and loads at any world size from the files one at a time.
#include "kindling/handlers/checkpointing/sharded_files.h"

#include <torch/serialize.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/files.h"
#include "kindling/dist/dist.h"
#include "kindling/error.h"
#include "kindling/handlers/checkpointing/checkpoint.h"

namespace kindling {
namespace handlers {
namespace {

constexpr const char* kWho = "kindling::handlers::save_sharded";
constexpr const char* kLoader = "kindling::handlers::load_sharded";
constexpr const char* kMarker = "sharded-checkpoint.txt";
constexpr const char* kFormat = "kindling.sharded_model.v1";

std::string shard_name(int64_t rank, int64_t world) {
  return "shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".pt";
}

// Every rank learns whether all succeeded: the rank whose `error` is set rethrows it, the others
// throw naming the first rank that failed (so that none waits for a rank that stopped).
void agree(const std::exception_ptr& error, const char* who, const std::string& what) {
  const int64_t failed = dist::all_reduce(static_cast<int64_t>(error ? dist::get_rank() : -1), dist::ReduceOp::kMax);
  if (error) std::rethrow_exception(error);
  KINDLING_CHECK(failed < 0, who, ": rank ", failed, " failed to ", what, " (its error is in its own output); no "
                 "rank goes on");
}

}  // namespace

int64_t sharded_save_world(const std::string& folder) {
  std::ifstream in(::kindling::detail::join_path(folder, kMarker));
  std::string format_key, format, world_key;
  int64_t world = 0;
  if (!(in >> format_key >> format >> world_key >> world)) return 0;
  return format_key == "format" && format == kFormat && world_key == "world" && world > 0 ? world : 0;
}

void save_sharded(const std::string& folder, nn::ShardedModel& model, const torch::optim::Optimizer* optimizer) {
  const int64_t rank = dist::get_rank(), world = dist::get_world_size();
  const std::string marker = ::kindling::detail::join_path(folder, kMarker);
  std::exception_ptr error;
  try {  // the folder, and no marker while the files change
    ::kindling::detail::make_directories(folder, kWho);
    if (rank == 0 && ::unlink(marker.c_str()) != 0 && errno != ENOENT)
      KINDLING_CHECK_T(Error, false, kWho, ": cannot remove the old marker '", marker, "': ", std::strerror(errno));
  } catch (...) {
    error = std::current_exception();
  }
  agree(error, kWho, "prepare the folder '" + folder + "'");
  try {
    const std::vector<char> bytes = torch::pickle_save(model.local_state_dict(optimizer));
    const std::string name = shard_name(rank, world);
    ::kindling::detail::replace_file(::kindling::detail::join_path(folder, name),
                                     ::kindling::detail::join_path(folder, ".kindling-partial-" + name), bytes.data(),
                                     bytes.size(), kWho);
  } catch (...) {
    error = std::current_exception();
  }
  agree(error, kWho, "write its file in '" + folder + "'");
  if (rank == 0) {
    std::ostringstream text;
    text << "format " << kFormat << "\nworld " << world << "\n";
    const std::string content = text.str();
    try {
      ::kindling::detail::replace_file(marker, ::kindling::detail::join_path(folder, ".kindling-partial-marker"),
                                       content.data(), content.size(), kWho);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree(error, kWho, "write the marker '" + marker + "'");
}

void load_sharded(const std::string& folder, nn::ShardedModel& model, torch::optim::Optimizer* optimizer) {
  const std::string what = "load the sharded save in '" + folder + "'";
  std::exception_ptr error;
  bool agreed = false;  // the ranks agreed (once every check passed here) before anything changes
  try {
    const int64_t saved = sharded_save_world(folder);
    KINDLING_CHECK(saved > 0, kLoader, ": '", folder, "' holds no complete sharded save (no valid '", kMarker,
                   "': another folder, or a save that did not finish)");
    model.load_local_state_dicts(
        [&](int k) {
          const std::string path = ::kindling::detail::join_path(folder, shard_name(k, saved));
          KINDLING_CHECK(::kindling::detail::is_regular_file(path), kLoader, ": '", path, "' is missing from the save of ",
                         saved, " ranks in '", folder, "'");
          return Checkpoint::load_file(path);
        },
        saved, optimizer, [&] {
          agreed = true;
          agree(nullptr, kLoader, what);
        });
  } catch (...) {
    if (agreed) throw;  // another rank failed (nothing changed here), or the optimizer refused its state
    error = std::current_exception();
  }
  if (!agreed) agree(error, kLoader, what);
}

}  // namespace handlers
}  // namespace kindling
