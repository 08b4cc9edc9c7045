// Writing the flight record (kindling/dist/flight_recorder.h): the folder, the file in the
// layout of PyTorch's flight recorder (version 2.10: what torch 2.15's torchfrtrace reads),
// and the moments it is written without being asked: after the first failure of a
// collective (call.cpp), on SIGUSR1, and when an exception ends the program.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <c10/core/ScalarType.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "common/env.h"
#include "common/files.h"
#include "common/pickle.h"
#include "dist/diagnostics/flight_dump.h"
#include "dist/diagnostics/flight_recorder.h"
#include "kindling/dist/flight_recorder.h"
#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/log.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {
using ::kindling::detail::get_env;
using ::kindling::detail::PickleWriter;

std::string file_safe(const std::string& text) {
  std::string out;
  for (char c : text) out.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_');
  return out;
}

// The job's identity, the same on every rank of one host without any exchange.
std::string job_identity() {
  try {
    if (auto id = run_id()) return *id;
  } catch (const std::exception&) {  // an unreadable launcher variable: the other identities
  }
  if (auto slurm = get_env("SLURM_JOB_ID")) return "slurm-" + *slurm;
  if (auto mpi = get_env("PMIX_NAMESPACE")) return "mpi-" + *mpi;
  auto addr = get_env("MASTER_ADDR"), port = get_env("MASTER_PORT");
  if (addr && port) return "job-" + *addr + "-" + *port;
  return "pid-" + std::to_string(::getpid());
}

// The analyzer's name of a kindling collective: all_gather_into and reduce_scatter as torch's
// recorder names all_gather_into_tensor and reduce_scatter_tensor.
std::string torch_op(const std::string& op) {
  const std::string async = "_async";
  std::string name = op;
  if (op.size() > async.size() && op.compare(op.size() - async.size(), async.size(), async) == 0)
    name = op.substr(0, op.size() - async.size());
  if (name == "all_gather_into") return "_all_gather_base";
  if (name == "reduce_scatter") return "_reduce_scatter_base";
  return name;
}

std::string ranks_literal(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

// A group's description in the dumps: torch's name for the world, a kindling one for the others.
std::string group_desc(int group) {
  return group == 0 ? std::string("default_pg") : "kindling_group_" + std::to_string(group);
}

void write_group_name(PickleWriter& w, int group) {
  w.text(std::to_string(group));
  w.text(group_desc(group));
}

// Sizes and dtypes of one side: all_gather's output is one tensor per member; a barrier
// has none. gather and scatter write the caller's tensor on both sides, the same on every rank.
// all_gather_into's and reduce_scatter's entries hold their flat input: the output is the
// group's size times as long, or that much shorter.
void write_tensors(PickleWriter& w, const FlightEntry& e, bool output, bool dtypes) {
  const std::string op = torch_op(e.op);
  const int copies = !e.has_tensor ? 0 : (output && op == "all_gather" ? e.group_size : 1);
  const auto side = [&](int64_t d) {
    if (output && op == "_all_gather_base") return d * e.group_size;
    if (output && op == "_reduce_scatter_base") return d / e.group_size;
    return d;
  };
  w.begin_list();
  for (int i = 0; i < copies; ++i) {
    if (dtypes) {
      w.text(c10::toString(e.dtype));
      continue;
    }
    w.begin_list();
    for (int64_t d : e.sizes) w.integer(side(d));
    w.end_list();
  }
  w.end_list();
}

void write_entry(PickleWriter& w, const FlightEntry& e, const std::string& engine) {
  const bool done = e.completed_steady != 0;
  const auto item = [&](const char* key) { w.text(key); };
  w.begin_dict();
  item("record_id"), w.integer(e.id);
  item("pg_id"), w.integer(e.group);
  item("process_group"), write_group_name(w, e.group), w.pair();
  item("collective_seq_id"), w.integer(e.seq);
  item("p2p_seq_id"), w.integer(0);
  item("op_id"), w.integer(e.seq);
  item("profiling_name"), w.text(engine + ":" + torch_op(e.op));
  item("time_created_ns"), w.integer(e.created_ns);
  item("time_discovered_started_ns"), w.integer(e.created_ns);
  item("time_discovered_completed_ns");
  done ? w.integer(e.created_ns + (e.completed_steady - e.started_steady)) : w.none();
  if (done) item("duration_ms"), w.real(static_cast<double>(e.completed_steady - e.started_steady) / 1e6);
  item("input_sizes"), write_tensors(w, e, false, false);
  item("input_dtypes"), write_tensors(w, e, false, true);
  item("output_sizes"), write_tensors(w, e, true, false);
  item("output_dtypes"), write_tensors(w, e, true, true);
  item("state"), w.text(done ? "completed" : "started");
  item("retired"), w.boolean(done);
  item("timeout_ms"), w.integer(e.timeout_ms);
  item("is_p2p"), w.boolean(false);
  item("frames"), w.begin_list(), w.begin_dict();
  item("name"), w.text(std::string("kindling::dist::") + e.op);
  item("filename"), w.text("");
  item("line"), w.integer(0);
  w.end_dict(), w.end_list(), w.end_dict();
}

std::string serialize(const FlightSnapshot& s, const std::string& reason) {
  PickleWriter w;
  const std::string engine = s.engine.empty() ? std::string("c10d") : s.engine;  // as the analyzer knows it
  w.begin_dict();
  w.text("version"), w.text("2.10");
  w.text("comm_lib_version"), w.text("");
  w.text("pg_config"), w.begin_dict();
  for (const auto& group : s.groups) {
    w.text(std::to_string(group.first)), w.begin_dict();
    w.text("name"), w.text(std::to_string(group.first));
    w.text("desc"), w.text(group_desc(group.first));
    w.text("ranks"), w.text(ranks_literal(group.second));
    w.end_dict();
  }
  w.end_dict();
  w.text("entries"), w.begin_list();
  for (const FlightEntry& e : s.entries) write_entry(w, e, engine);
  w.end_list();
  w.text("kindling"), w.begin_dict();
  w.text("rank"), w.integer(s.rank);
  w.text("world_size"), w.integer(s.world_size);
  w.text("backend"), w.text(s.backend);
  w.text("reason"), w.text(reason);
  w.end_dict();
  w.end_dict();
  return w.finish();
}

// One dump at a time (the SIGUSR1 thread, a failure, the program's request share one temporary
// file name), and none once the program exits (exiting_dumps): the dump needs the log and the
// library's state, which exit destroys.
std::mutex g_dump_mu;
bool g_exiting = false;  // under g_dump_mu

constexpr const char* kDumpWho = "kindling::dist::dump_flight_record";

// A temporary name in the record folder that does not look like a record to torch's analyzer:
// torchfrtrace reads every file whose name contains the common prefix (kindling_fr_rank_) and
// infers that prefix from the names ending in a number.
std::string temp_name(const std::string& folder, const char* kind, int rank) {
  return folder + "/." + kind + "-rank" + std::to_string(rank) + "-pid" + std::to_string(::getpid()) + ".tmp";
}

// Writes all of `bytes` to `fd` (retrying on EINTR and short writes) and fsyncs it; throws
// kindling::Error naming `what` and the system's reason.
void write_all(int fd, const std::string& bytes, const std::string& what) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    KINDLING_CHECK_T(::kindling::Error, n > 0, kDumpWho, ": cannot write ", what, " (",
                     std::strerror(n < 0 ? errno : EIO), "); check the free space of its folder");
    done += static_cast<std::size_t>(n);
  }
  KINDLING_CHECK_T(::kindling::Error, ::fsync(fd) == 0, kDumpWho, ": cannot sync ", what, " (", std::strerror(errno),
                   ")");
}

// Puts `bytes` at `path` (in `folder`) through a file without a name (O_TMPFILE), named only
// once whole: a rank killed while writing (the launcher's SIGKILL after its SIGUSR1, a full
// disk's SIGXFSZ) leaves nothing in the folder torch's analyzer reads. A record already there
// is replaced by a rename, whose name is in the folder for two system calls only. Returns false
// where the file system has no unnamed files (the caller writes a named temporary instead).
bool publish_unnamed(const std::string& folder, const std::string& path, int rank, const std::string& bytes) {
  const int fd = ::open(folder.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  write_all(fd, bytes, "the flight record for " + path);
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
  const int link_error = errno;
  if (link_error != EEXIST) return false;  // no /proc here: the named temporary
  const std::string temp = temp_name(folder, "replacing", rank);
  ::unlink(temp.c_str());
  KINDLING_CHECK_T(::kindling::Error, ::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW) == 0,
                   kDumpWho, ": cannot name the new flight record ", temp, " (", std::strerror(errno), ")");
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(temp.c_str());
    KINDLING_CHECK_T(::kindling::Error, false, kDumpWho, ": cannot rename ", temp, " to ", path, " (",
                     std::strerror(rename_error), ")");
  }
  return true;
}

std::string write_dump(const std::string& reason) {
  std::lock_guard<std::mutex> lock(g_dump_mu);
  if (g_exiting || !flight_enabled()) return "";
  const FlightSnapshot s = flight_snapshot();
  const std::string folder = flight_record_folder();
  ::kindling::detail::make_directories(folder, kDumpWho);
  const std::string path = folder + "/kindling_fr_rank_" + std::to_string(s.rank);
  const std::string bytes = serialize(s, reason);
  if (publish_unnamed(folder, path, s.rank, bytes)) {
    ::kindling::detail::sync_directory(folder);
    return path;
  }
  // A file system without O_TMPFILE (NFS): a named temporary, which a rank killed while
  // writing leaves behind.
  const std::string temp = temp_name(folder, "partial", s.rank);
  ::kindling::detail::replace_file(path, temp, bytes.data(), bytes.size(), kDumpWho);
  return path;
}

// Dumps (the file keeps `reason`) and says where and, in a few words, `why`; never throws (it
// runs on the way out of a failure).
void dump_quietly(const std::string& why, const std::string& reason) noexcept {
  try {
    const std::string path = write_dump(reason);
    if (!path.empty())
      log(LogLevel::kWarning, "flight record (" + why + ") written to " + path +
                                  "; read every rank's with: torchfrtrace " + flight_record_folder());
  } catch (const std::exception& e) {
    try {
      log(LogLevel::kError, std::string("the flight record could not be written: ") + e.what());
    } catch (...) {
    }
  }
}

// SIGUSR1: the handler only writes a byte to a pipe (all a signal handler may safely do);
// a thread waiting on the pipe writes the dump.
int g_signal_pipe[2] = {-1, -1};

void on_sigusr1(int) {
  const char byte = 'd';
  if (g_signal_pipe[1] >= 0) (void)!::write(g_signal_pipe[1], &byte, 1);
}

// At exit: SIGUSR1 is ignored from now on (its default action would end the process with
// another cause), and a dump under way ends before exit goes on to destroy what it uses. A
// launcher asks a rank still running for its record with SIGUSR1 when another rank fails: the
// rank may be exiting by then.
void exiting_dumps() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGUSR1, &ignore, nullptr);
  std::lock_guard<std::mutex> lock(g_dump_mu);
  g_exiting = true;
}

void install_signal_dump() {
  struct sigaction current {};
  if (::sigaction(SIGUSR1, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;  // the program's own
  if (::pipe(g_signal_pipe) != 0) return;
  std::thread([] {
    char byte = 0;
    while (::read(g_signal_pipe[0], &byte, 1) == 1) dump_quietly("SIGUSR1", "SIGUSR1");
  }).detach();
  struct sigaction action {};
  action.sa_handler = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, nullptr);
  std::atexit(exiting_dumps);  // after the log and the ring exist: runs before they are destroyed
}

std::terminate_handler g_previous_terminate = nullptr;
std::atomic<bool> g_failure_dumped{false};  // the failure's own record is not replaced on the way out

[[noreturn]] void dump_then_terminate() {
  if (!g_failure_dumped.load())
    dump_quietly("an uncaught exception ends the program", "an uncaught exception ends the program");
  if (g_previous_terminate) g_previous_terminate();
  std::abort();
}

}  // namespace

void flight_start_world(int rank, int world_size, const std::string& backend, const BackendTraits* traits) {
  flight_reset(rank, world_size, backend, traits);
  g_failure_dumped = false;
  if (!flight_enabled()) return;
  static std::once_flag hooks;
  std::call_once(hooks, [] {
    install_signal_dump();
    g_previous_terminate = std::set_terminate(dump_then_terminate);
  });
}

void flight_dump_after_failure(const std::string& reason) noexcept {
  dump_quietly("the first failed collective", reason.substr(0, 500));
  g_failure_dumped = true;
}

}  // namespace detail

std::string flight_record_folder() {
  if (auto dir = ::kindling::detail::get_env("KINDLING_FLIGHT_RECORD_DIR"); dir && !dir->empty()) return *dir;
  return ::kindling::detail::temporary_directory() + "/kindling-flight-records/" +
         detail::file_safe(detail::job_identity());
}

std::string dump_flight_record() { return detail::write_dump("asked by the program"); }

}  // namespace dist
}  // namespace kindling
