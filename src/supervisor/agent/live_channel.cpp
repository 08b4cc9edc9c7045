// The agent's side of the live-recovery files (see live_channel.h).
#include "supervisor/agent/live_channel.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>


namespace kindling {
namespace supervisor {

LiveChannel::LiveChannel() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kindling-live-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("cannot make a folder for the live-recovery files: " + std::string(std::strerror(errno)));
  folder_ = pattern;
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
  const std::string path = folder_ + "/" + name, temporary = path + ".new";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool written = fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) written = ::close(fd) == 0 && written;
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "kindling-run: cannot write %s for the workers: %s\n", path.c_str(), std::strerror(errno));
  }
}

void LiveChannel::announce(int round) { write(kLiveAnnounceFile, std::to_string(round) + "\n"); }

void LiveChannel::publish(const RoundLayout& r) { write(kLiveRoundFile, ::kindling::detail::encode_round(r, '\n')); }

bool LiveChannel::taken_part() const { return ::access((folder_ + "/" + kLiveTakingPartFile).c_str(), F_OK) == 0; }

std::optional<std::string> LiveChannel::take_request(int round) {
  const std::string path = folder_ + "/" + kLiveRequestFile;
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return std::nullopt;
  std::string text(512, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
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
