#pragma once
// Where every rank of the world runs (host name and addresses), published by each rank as
// it joins the rendezvous, so that an engine's message about a peer address ("Connection
// closed by peer [10.0.0.2]:4711") can say which ranks and which host were lost.
#include <optional>
#include <string>
#include <vector>

namespace kindling {
namespace dist {
namespace detail {

/// This rank's place as one line of text: its host name and its non-loopback addresses.
/// Local; never throws.
std::string own_place();

/// Keeps every rank's place (own_place() of each rank, by rank; unset for a rank that did
/// not publish one: a plain torch.distributed peer, or one that has not joined) for
/// ranks_behind_addresses() and on_host(). Called by the c10d backends on every rank
/// while the world is made; replaces what an earlier world left, but with `keep_known` a rank
/// unset in `places` keeps the place known before (a read cut short by the store's host
/// ending). Never throws.
void record_places(const std::vector<std::optional<std::string>>& places, bool keep_known = false);

/// For each address in `engine_message` (IPv4 or IPv6 in brackets, or IPv4 before ":port")
/// that belongs to known ranks: "the peer at A is host H (ranks R1, R2)", joined by "; ".
/// Empty when no address of the message is known (one host: every peer has only loopback).
/// An address followed by `store_port` (":P", or ", P" as LibTorch 2.x's store client writes
/// "(A, P)") is the rendezvous store's, not a peer's, and is left out; -1: none is.
/// Local; never throws.
std::string ranks_behind_addresses(const std::string& engine_message, int store_port = -1);

/// " on host H" when rank's place is known, else "" (for "rank 3 on host node1"). Local;
/// never throws.
std::string on_host(int rank);

}  // namespace detail
}  // namespace dist
}  // namespace kindling
