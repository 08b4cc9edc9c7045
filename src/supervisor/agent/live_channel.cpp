// The agent's side of the live-recovery files (see live_channel.h).
#include "supervisor/agent/live_channel.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>

#include "common/files.h"


namespace kindling {
namespace supervisor {

LiveChannel::LiveChannel() {
  folder_ = ::kindling::detail::make_temporary_directory("kindling-live", "kindling-run (the live-recovery files)");
}

LiveChannel::~LiveChannel() {
  if (DIR* d = ::opendir(folder_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((folder_ + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(folder_.c_str());
}

void LiveChannel::write(const std::string& name, const std::string& text) {
  const std::string path = folder_ + "/" + name;
  try {
    ::kindling::detail::replace_file(path, path + ".new", text.data(), text.size(), "kindling-run (live recovery)");
  } catch (const std::exception& e) {
    // The workers then keep the round they are in; the agent's next round tells them again.
    std::fprintf(stderr, "%s\n", e.what());
  }
}

void LiveChannel::announce(int round) { write(kLiveAnnounceFile, std::to_string(round) + "\n"); }

void LiveChannel::publish(const RoundLayout& r) { write(kLiveRoundFile, ::kindling::detail::encode_round(r, '\n')); }

bool LiveChannel::taken_part() const { return ::access((folder_ + "/" + kLiveTakingPartFile).c_str(), F_OK) == 0; }

int LiveChannel::standing_by(int nproc) const {
  int n = 0;
  for (int local = 0; local < nproc; ++local)
    n += ::access((folder_ + "/" + kLiveStandbyFile + "." + std::to_string(local)).c_str(), F_OK) == 0 ? 1 : 0;
  return n;
}

namespace {

// The first 512 bytes of a worker's file in the folder; unset when there is none.
std::optional<std::string> read_worker_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return std::nullopt;
  std::string text(512, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  return text;
}

}  // namespace

std::optional<std::string> LiveChannel::leave_request() const {
  std::optional<std::string> text = read_worker_file(folder_ + "/" + kLiveLeaveFile);
  if (!text) return std::nullopt;
  for (char& c : *text)
    if (c == '\n' || c == '\r') c = ' ';
  return text->empty() ? std::string("a worker asked this node to leave") : *text;
}

std::optional<std::string> LiveChannel::take_request(int round) {
  const std::string path = folder_ + "/" + kLiveRequestFile;
  std::optional<std::string> read = read_worker_file(path);
  if (!read) return std::nullopt;
  std::string text = *read;
  ::unlink(path.c_str());
  const auto newline = text.find('\n');
  if (newline == std::string::npos || std::atoi(text.c_str()) < round) return std::nullopt;
  text = text.substr(newline + 1);
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  return text.empty() ? std::string("a worker asked for a new round") : text;
}

}  // namespace supervisor
}  // namespace kindling
