// Relaying a worker's output (worker.h).
#include <errno.h>
#include <unistd.h>

#include "supervisor/process/worker.h"

namespace kindling {
namespace supervisor {
namespace {

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

void keep_tail(Worker& w, Stream& s, const std::string& line, const SupervisorOptions& opt) {
  if (!s.is_err) return;
  w.result.stderr_tail.push_back(line);
  while (w.result.stderr_tail.size() > opt.tail_lines) w.result.stderr_tail.pop_front();
}

void emit_line(Worker& w, Stream& s, const std::string& line, const SupervisorOptions& opt) {
  std::string text = opt.prefix_output ? "[rank" + std::to_string(w.result.rank) + "]: " + line + "\n" : line + "\n";
  write_all(s.is_err ? STDERR_FILENO : STDOUT_FILENO, text);
  keep_tail(w, s, line, opt);
}

// Terminal relay (Stream::terminal): the rank prefix at the start of each line and after
// each carriage return ("\r[rank0]: Epoch [1/3]: [5/117] ..." redraws the line).
void relay_as_it_comes(Worker& w, Stream& s, const char* data, std::size_t n, const SupervisorOptions& opt) {
  const std::string prefix = opt.prefix_output ? "[rank" + std::to_string(w.result.rank) + "]: " : "";
  std::string text;
  for (std::size_t i = 0; i < n; ++i) {
    const char c = data[i];
    const bool ends_line = c == '\n' || c == '\r';
    if (!ends_line && !s.line_open) text += prefix;
    s.line_open = !ends_line;
    text += c;
    if (c == '\n') {
      keep_tail(w, s, s.partial, opt);
      s.partial.clear();
    } else if (c == '\r') {
      s.partial.clear();  // the line is drawn again
    } else {
      s.partial += c;
    }
  }
  write_all(s.is_err ? STDERR_FILENO : STDOUT_FILENO, text);
}

}  // namespace

bool pump(Worker& w, Stream& s, const SupervisorOptions& opt) {
  char buf[8192];
  while (true) {
    ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0 && s.terminal) {
      relay_as_it_comes(w, s, buf, static_cast<std::size_t>(n), opt);
      continue;
    }
    if (n > 0) {
      s.partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0, nl;
      while ((nl = s.partial.find('\n', start)) != std::string::npos) {
        emit_line(w, s, s.partial.substr(start, nl - start), opt);
        start = nl + 1;
      }
      s.partial.erase(0, start);
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    // EOF or error: flush an unterminated last line.
    if (s.terminal) {
      if (s.line_open) write_all(s.is_err ? STDERR_FILENO : STDOUT_FILENO, "\n");
      if (!s.partial.empty()) keep_tail(w, s, s.partial, opt);
    } else if (!s.partial.empty()) {
      emit_line(w, s, s.partial, opt);
    }
    s.partial.clear();
    ::close(s.fd);
    s.fd = -1;
    return false;
  }
}

void close_streams(Worker& w, const SupervisorOptions& opt) {
  for (Stream* s : {&w.out, &w.err}) {
    if (s->fd < 0) continue;
    if (!s->partial.empty()) emit_line(w, *s, s->partial, opt);
    ::close(s->fd);
    s->fd = -1;
  }
}

}  // namespace supervisor
}  // namespace kindling
