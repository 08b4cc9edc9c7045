#pragma once
// Client connections to a TCPStore server (hosted by rank 0, by torchrun's agent or by a
// Python rank), the one way kindling opens them.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <string>

namespace kindling {
namespace dist {
namespace detail {

/// Opens a client connection to the TCPStore server at `host`:`opts.port`; `opts.isServer`
/// must be false. With `opts.waitWorkers` and `opts.numWorkers` it adds itself to the
/// server's "init/" counter, as c10d's client does (a Python-hosted server waits for it).
///
/// On LibTorch releases whose c10d::TCPStore client runs a watch thread (before 2.2) this
/// is kindling's own client of the same wire protocol, with no thread of its own: that
/// thread spins on a connection the server closed and ends the process (std::terminate)
/// when the connection is reset. On later releases it is c10d::TCPStore.
///
/// Store errors are std::system_error naming the store's address and the operation
/// ("... reset by peer" when the server went away) and c10::Error "Socket Timeout" when a
/// wait runs past its timeout. Any rank may call it, from any thread; each operation of the
/// returned store is serialized. Throws std::system_error when it cannot connect within
/// `opts.timeout`.
c10::intrusive_ptr<c10d::Store> open_store_client(const std::string& host, const c10d::TCPStoreOptions& opts);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
