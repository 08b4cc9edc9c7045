#pragma once
// Checks made before the rendezvous so that what cannot heal fails at once with a clear
// message instead of retrying until the timeout: a host name that does not resolve, a
// missing folder of a file:// store, a port held by a program that is not a store.
#include <chrono>
#include <functional>
#include <string>

namespace kindling {
namespace dist {
namespace detail {

/// Resolves `host` (retrying a temporary DNS failure for at most `limit`); throws
/// kindling::UsageError naming `what` (e.g. "MASTER_ADDR") for an empty or unknown name.
void check_resolvable(const std::string& host, const std::string& what, std::chrono::milliseconds limit);

/// Throws kindling::UsageError when the folder that would hold the file store `path`
/// does not exist or is not a folder.
void check_store_folder(const std::string& path, const std::string& init_method);

/// One attempt to open a TCP connection to host:port (every address the name resolves to,
/// in order). Returns the connected socket (close-on-exec; the caller closes it), or -1
/// with errno of the last attempt (EHOSTUNREACH when the name does not resolve).
int connect_tcp(const std::string& host, int port);

/// Waits until something accepts TCP connections at host:port (a refused connection is
/// retried: the store's host may not have started yet). Returns false at `deadline`.
bool wait_for_listener(const std::string& host, int port, std::chrono::steady_clock::time_point deadline);

/// Runs `connect` on a helper thread and waits at most `limit` for it. Returns false when
/// it has not finished by then (the thread is left behind, blocked: a peer that accepts
/// connections but never answers). Rethrows what `connect` threw.
bool run_bounded(std::function<void()> connect, std::chrono::milliseconds limit);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
