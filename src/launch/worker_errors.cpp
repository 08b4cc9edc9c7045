// The worker's side of the launchers' restart and error reporting: restart_count(),
// run_id() and record_error() (kindling/dist/launch_env.h), plus the terminate handler that records an
// exception nobody caught.
#include "launch/worker_errors.h"

#include <cxxabi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include "common/env.h"
#include "kindling/dist/launch_env.h"
#include "kindling/error.h"
#include "kindling/log.h"
#include "common/error_file.h"

namespace kindling {
namespace dist {
namespace {

std::string type_name(const std::exception& e) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(typeid(e).name(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? name.get() : typeid(e).name();
}

std::terminate_handler g_previous = nullptr;

// A kindling error that escaped the program is a failure the program can be told about, not a
// crash: its message, once, and exit code 1 (as a Python program's uncaught exception), with
// no abort and no core. Any other exception goes on to the previous handler (abort).
[[noreturn]] void record_then_terminate() {
  if (auto current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const Error& e) {
      record_error(e);
      std::fflush(stdout);
      log(LogLevel::kError,
          "the program did not catch this " + type_name(e) + ", so it ends with exit code 1: " + e.what());
      std::fflush(stderr);
      std::_Exit(1);
    } catch (const std::exception& e) {
      record_error(e);
    } catch (...) {
    }
  }
  if (g_previous) g_previous();
  std::abort();
}

}  // namespace

namespace {
// The launchers that restart a job and say so in TORCHELASTIC_RESTART_COUNT.
bool started_by_restarting_launcher() {
  const std::string who = detect_launch_environment().launcher;
  return who == "kindling-run" || who == "parallel" || who == "torchrun";
}
}  // namespace

int restart_count() {
  // The launcher's value, or the round's after a live-recovery rejoin (current_environment).
  const EnvMap env = current_environment();
  const auto found = env.find("TORCHELASTIC_RESTART_COUNT");
  const std::optional<std::string> v = found != env.end() ? std::optional<std::string>(found->second) : std::nullopt;
  if (!v || v->empty() || !started_by_restarting_launcher()) return 0;
  return ::kindling::detail::parse_int(*v, "environment variable TORCHELASTIC_RESTART_COUNT");
}

std::optional<std::string> run_id() {
  const std::string who = detect_launch_environment().launcher;
  std::optional<std::string> id;
  if (who == "kindling-run" || who == "parallel") id = ::kindling::detail::get_env("KINDLING_RUN_ID");
  if (who == "torchrun") id = ::kindling::detail::get_env("TORCHELASTIC_RUN_ID");
  if (id && (id->empty() || *id == "none")) id.reset();
  return id;
}

std::optional<std::string> run_instance() {
  const std::string who = detect_launch_environment().launcher;
  if (who != "kindling-run" && who != "parallel") return std::nullopt;
  auto token = ::kindling::detail::get_env("KINDLING_RUN_INSTANCE");
  if (token && token->empty()) token.reset();
  return token;
}

bool record_error(const std::exception& e) {
  const std::string path = ::kindling::detail::get_env("TORCHELASTIC_ERROR_FILE").value_or("");
  if (path.empty()) return false;
  // The first error this process recorded is its root cause: a later record of the same
  // failure, on its way out, would only move the time on.
  if (::access(path.c_str(), F_OK) == 0) return true;
  return ::kindling::detail::write_error_file(path, type_name(e), e.what());
}

namespace detail {
void record_uncaught_errors() {
  static const bool installed = [] {
    g_previous = std::set_terminate(record_then_terminate);
    return true;
  }();
  (void)installed;
}
}  // namespace detail

}  // namespace dist
}  // namespace kindling
