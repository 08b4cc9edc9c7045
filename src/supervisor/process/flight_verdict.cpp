// The flight records of a failed attempt, read back (flight_verdict.h). The files are the
// layout written by src/dist/diagnostics/flight_dump.cpp: a pickled dict whose "entries" hold, per
// collective, "process_group" (name, description), "collective_seq_id", "profiling_name"
// ("<engine>:<operation>"), "input_sizes", "input_dtypes" and "state".
#include "supervisor/process/flight_verdict.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "common/env.h"
#include "common/files.h"
#include "common/pickle.h"

namespace kindling {
namespace supervisor {
namespace {
using ::kindling::detail::PickleValue;
const char kPrefix[] = "kindling_fr_rank_";

struct Record {
  int64_t seq = 0;
  std::string op, sizes, dtypes, state;
};
// One rank's records: group name -> records by sequence number.
using Records = std::map<std::string, std::map<int64_t, Record>>;
// The records of one group: rank -> its records by sequence number.
using Dumps = std::map<int, const std::map<int64_t, Record>*>;

std::string text_of(const PickleValue* v) {
  if (v == nullptr) return "?";
  if (v->kind == PickleValue::Kind::kText) return v->text;
  if (v->kind == PickleValue::Kind::kInt) return std::to_string(v->integer);
  std::string s = "[";
  for (std::size_t i = 0; i < v->items.size(); ++i) s += (i ? ", " : "") + text_of(&v->items[i]);
  return s + "]";
}

Records read_records(const std::string& path, int& world_size) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) throw std::runtime_error("cannot be read");
  const PickleValue dump = ::kindling::detail::read_pickle(bytes.str());
  const PickleValue* entries = dump.get("entries");
  if (entries == nullptr) throw std::runtime_error("has no entries");
  if (const PickleValue* about = dump.get("kindling"))
    if (const PickleValue* size = about->get("world_size")) world_size = static_cast<int>(size->integer);
  Records out;
  for (const PickleValue& e : entries->items) {
    const PickleValue* group = e.get("process_group");
    const PickleValue* seq = e.get("collective_seq_id");
    if (group == nullptr || group->items.size() != 2 || seq == nullptr) throw std::runtime_error("has a broken entry");
    Record r;
    r.seq = seq->integer;
    r.op = text_of(e.get("profiling_name"));
    r.op = r.op.substr(r.op.find(':') + 1);
    r.sizes = text_of(e.get("input_sizes"));
    r.dtypes = text_of(e.get("input_dtypes"));
    r.state = text_of(e.get("state"));
    out[group->items[0].text][r.seq] = r;
  }
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string group_label(const std::string& name) { return name == "0" ? "the world" : "group #" + name; }

// The ranks of `dumps` grouped by what `field` gives for their record `seq`.
template <typename Field>
std::map<std::string, std::vector<int>> split(const Dumps& dumps, int64_t seq, Field field) {
  std::map<std::string, std::vector<int>> by_value;
  for (const auto& d : dumps) by_value[field(d.second->at(seq))].push_back(d.first);
  return by_value;
}

std::string describe_split(const std::map<std::string, std::vector<int>>& by_value) {
  std::string s;
  for (const auto& v : by_value) s += (s.empty() ? "" : ", ") + ranks_text(v.second) + " " + v.first;
  return s;
}

// Where the ranks of `group` disagree at collective `seq`, or "" where they do not.
std::string mismatch_at(const std::string& group, const Dumps& dumps, int64_t seq) {
  std::vector<int> absent;
  Dumps present;
  for (const auto& d : dumps) {
    if (d.second->count(seq))
      present[d.first] = d.second;
    else
      absent.push_back(d.first);
  }
  if (present.empty()) return "";
  const std::string where = "on " + group_label(group) + ", collective #" + std::to_string(seq) + " (" +
                            present.begin()->second->at(seq).op + "): ";
  if (!absent.empty()) {
    std::string last;
    for (int r : absent) {
      const Record& l = dumps.at(r)->rbegin()->second;
      last += (last.empty() ? "" : "; ") + std::to_string(r) + ": #" + std::to_string(l.seq) + " " + l.op + ", " +
              l.state;
    }
    return where + describe_split(split(present, seq, [](const Record& r) { return r.state; })) + "; " +
           ranks_text(absent) + " never called it (the last collective of rank " + last + ")";
  }
  const std::pair<const char*, std::string Record::*> fields[] = {
      {"operation", &Record::op}, {"sizes", &Record::sizes}, {"dtypes", &Record::dtypes}};
  for (const auto& field : fields) {
    const auto by_value = split(present, seq, [&](const Record& r) { return r.*field.second; });
    if (by_value.size() > 1) return where + "the ranks differ in " + field.first + ": " + describe_split(by_value);
  }
  return "";
}

// The first collective of `group` that its ranks did not call alike; else the collective they
// wait in, if any; else "".
std::string first_mismatch(const std::string& group, const Dumps& dumps) {
  int64_t from = 0, to = 0;
  for (const auto& d : dumps) {
    from = std::max(from, d.second->begin()->first);  // the oldest record every ring still holds
    to = std::max(to, d.second->rbegin()->first);
  }
  for (int64_t seq = from; seq <= to; ++seq) {
    const std::string found = mismatch_at(group, dumps, seq);
    if (!found.empty()) return found;
  }
  std::vector<int> waiting;
  for (const auto& d : dumps)
    if (d.second->rbegin()->second.state != "completed") waiting.push_back(d.first);
  if (waiting.empty()) return "";
  return "on " + group_label(group) + ", " + ranks_text(waiting) + (waiting.size() == 1 ? " waits" : " wait") +
         " in collective #" + std::to_string(to) +
         " (" + dumps.begin()->second->rbegin()->second.op + ")";
}

}  // namespace

std::string flight_attempt_folder(const std::string& run_id, int attempt) {
  const auto set = ::kindling::detail::get_env("KINDLING_FLIGHT_RECORD_DIR");
  const std::string base = set && !set->empty()
                               ? *set
                               : ::kindling::detail::temporary_directory() + "/kindling-flight-records/" + run_id;
  const std::string folder = base + "/attempt" + std::to_string(attempt);
  ::kindling::detail::make_directories(folder, "kindling-run (the flight record folder)");
  if (DIR* d = ::opendir(folder.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::strncmp(e->d_name, kPrefix, sizeof kPrefix - 1) == 0) std::remove((folder + "/" + e->d_name).c_str());
    ::closedir(d);
  }
  return folder;
}

void remove_empty_flight_folders(const std::string& folder) {
  if (::rmdir(folder.c_str()) != 0) return;  // records in it (or gone already)
  if (const auto set = ::kindling::detail::get_env("KINDLING_FLIGHT_RECORD_DIR"); set && !set->empty())
    return;  // the user's folder stays
  const std::string run = folder.substr(0, folder.rfind('/'));
  if (::rmdir(run.c_str()) == 0) ::rmdir(run.substr(0, run.rfind('/')).c_str());
}

std::string flight_verdict(const std::string& folder) {
  std::map<int, Records> dumps;
  std::string unreadable;
  int world_size = 0;
  if (DIR* d = ::opendir(folder.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(kPrefix, 0) != 0 || name.find_first_not_of("0123456789", sizeof kPrefix - 1) != std::string::npos)
        continue;
      const int rank = std::atoi(name.c_str() + sizeof kPrefix - 1);
      try {
        dumps[rank] = read_records(folder + "/" + name, world_size);
      } catch (const std::exception& e) {
        unreadable += "; rank " + std::to_string(rank) + "'s " + e.what();
      }
    }
    ::closedir(d);
  }
  if (dumps.empty() && unreadable.empty()) return "";
  std::vector<int> ranks;
  std::map<std::string, Dumps> groups;
  for (const auto& d : dumps) {
    ranks.push_back(d.first);
    for (const auto& g : d.second)
      if (!g.second.empty()) groups[g.first][d.first] = &g.second;
  }
  std::string findings;
  for (const auto& g : groups) {
    const std::string found = first_mismatch(g.first, g.second);
    if (!found.empty()) findings += "; " + found;
  }
  std::vector<int> silent;
  for (int r = 0; r < world_size; ++r)
    if (!dumps.count(r)) silent.push_back(r);
  if (!silent.empty()) findings += "; no record from " + ranks_text(silent);
  if (findings.empty() && !dumps.empty()) findings = "; the ranks called the same collectives";
  return (ranks.empty() ? std::string("none readable") : ranks_text(ranks)) + " wrote one in " + folder + findings +
         unreadable + " (torch's analyzer reads them: torchfrtrace " + folder + ")";
}

bool handles_sigusr1(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.compare(0, 7, "SigCgt:") != 0) continue;
    const unsigned long long caught = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caught >> (SIGUSR1 - 1)) & 1ULL;
  }
  return false;
}

bool flight_record_written(const std::string& folder, int rank, int64_t since_ns) {
  struct stat st {};
  if (::stat((folder + "/kindling_fr_rank_" + std::to_string(rank)).c_str(), &st) != 0) return false;
  const int64_t written = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  return written >= since_ns;
}

}  // namespace supervisor
}  // namespace kindling
