#pragma once
// Checks made before the rendezvous so that what cannot heal fails at once with a clear
// message instead of retrying until the timeout: a host name that does not resolve, a
// missing folder of a file:// store, a port held by a program that is not a store.
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kindling {
namespace dist {
namespace detail {

/// Resolves `host` (retrying a temporary DNS failure for at most `limit`); throws
/// kindling::UsageError naming `what` (e.g. "MASTER_ADDR") for an empty or unknown name.
void check_resolvable(const std::string& host, const std::string& what, std::chrono::milliseconds limit);

/// Throws kindling::UsageError when the folder that would hold the file store `path`
/// does not exist or is not a folder.
void check_store_folder(const std::string& path, const std::string& init_method);

/// The local address this host sends from to reach `host` (numeric, IPv4 or IPv6): a UDP
/// socket is connected to it, which sends nothing, and asked for its own address. Unset
/// when the name does not resolve or no route leads there. Never throws.
std::optional<std::string> source_address_towards(const std::string& host);

/// This host's addresses on interfaces that are up, numeric, without loopback and IPv6
/// link-local ones. Never throws (empty when they cannot be listed).
std::vector<std::string> own_addresses();

/// Whether `address` (numeric) is a loopback address (127.0.0.0/8, ::1).
bool is_loopback_address(const std::string& address);

/// One attempt to open a TCP connection to host:port (every address the name resolves to,
/// in order), each address given at most `limit` (then ETIMEDOUT). Returns the connected
/// socket (blocking, close-on-exec; the caller closes it), or -1 with errno of the last
/// attempt (EHOSTUNREACH when the name does not resolve).
int connect_tcp(const std::string& host, int port, std::chrono::milliseconds limit = std::chrono::seconds(2));

/// Waits until something accepts TCP connections at host:port (a refused connection is
/// retried: the store's host is up but may not have started the store yet). Returns false
/// at `deadline`. Logs a warning every 10 s of waiting, with the last error. Throws
/// kindling::CommunicationError naming host:port, its address and the error when the host
/// has not answered at all (no route, no reply; a refusal is an answer) for `silent_limit`:
/// rank 0's host is down or cut off, and waiting the whole timeout would only hide it; also
/// (within 100 ms) once `given_up` is set (WorldConfig::given_up; may be null).
bool wait_for_listener(const std::string& host, int port, std::chrono::steady_clock::time_point deadline,
                       std::chrono::milliseconds silent_limit, const std::atomic<bool>* given_up = nullptr);

/// Runs `connect` on a helper thread and waits at most `limit` for it. Returns false when
/// it has not finished by then (the thread is left behind, blocked: a peer that accepts
/// connections but never answers). Rethrows what `connect` threw.
bool run_bounded(std::function<void()> connect, std::chrono::milliseconds limit);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
