// Where every rank runs, and the ranks behind an address (see peers.h).
#include "dist/rendezvous/peers.h"

#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include "dist/rendezvous/probe.h"
#include "common/host.h"

namespace kindling {
namespace dist {
namespace detail {
namespace {

struct Place {
  std::string host;
  std::vector<std::string> addresses;
};

std::mutex places_mu;
std::vector<std::optional<Place>> places;  // by rank

}  // namespace

std::string own_place() {
  std::string text = ::kindling::detail::host_name("localhost");
  for (const auto& a : own_addresses()) text += " " + a;
  return text;
}

void record_places(const std::vector<std::optional<std::string>>& entries, bool keep_known) {
  std::vector<std::optional<Place>> out;
  for (const auto& e : entries) {
    if (!e) {
      out.emplace_back();
      continue;
    }
    std::istringstream words(*e);
    Place p;
    words >> p.host;
    for (std::string a; words >> a;) p.addresses.push_back(a);
    out.emplace_back(std::move(p));
  }
  std::lock_guard<std::mutex> lock(places_mu);
  if (keep_known && places.size() == out.size()) {
    for (std::size_t r = 0; r < out.size(); ++r) {
      if (!out[r]) out[r] = places[r];
    }
  }
  places = std::move(out);
}

namespace {

// Whether the text right after an address names `port`: "A:port" (gloo, TCPStore), or the
// "(A, port)" of LibTorch 2.x's TCPStore client.
bool names_port(const std::string& after, int port) {
  if (port < 0) return false;
  static const std::regex kPort(R"(^(?::|, )(\d+))");
  std::smatch m;
  return std::regex_search(after, m, kPort) && m[1].str() == std::to_string(port);
}

}  // namespace

std::string ranks_behind_addresses(const std::string& engine_message, int store_port) {
  // Gloo writes peers as "[address]:port"; other engines as "address:port".
  static const std::regex kAddress(R"(\[([0-9A-Fa-f:.]+)\]|\b(\d{1,3}(?:\.\d{1,3}){3})\b)");
  std::lock_guard<std::mutex> lock(places_mu);
  std::map<std::string, bool> seen;
  std::string out;
  for (std::sregex_iterator m(engine_message.begin(), engine_message.end(), kAddress), end; m != end; ++m) {
    const std::string address = (*m)[1].matched ? (*m)[1].str() : (*m)[2].str();
    // The rendezvous store's own address is where every rank meets, not a rank that was lost:
    // naming its host's ranks would blame the store's host for another rank's absence.
    if (names_port(m->suffix().str(), store_port)) continue;
    if (seen[address]) continue;
    seen[address] = true;
    std::string host, ranks;
    int count = 0;
    for (std::size_t r = 0; r < places.size(); ++r) {
      if (!places[r]) continue;
      for (const auto& a : places[r]->addresses) {
        if (a != address) continue;
        host = places[r]->host;
        ranks += (count++ ? ", " : "") + std::to_string(r);
        break;
      }
    }
    if (count == 0) continue;
    out += (out.empty() ? "" : "; ") + ("the peer at " + address + " is host " + host + " (rank") +
           (count > 1 ? "s " : " ") + ranks + ")";
  }
  return out;
}

std::string on_host(int rank) {
  std::lock_guard<std::mutex> lock(places_mu);
  const auto r = static_cast<std::size_t>(rank);
  if (rank < 0 || r >= places.size() || !places[r] || places[r]->host.empty()) return "";
  return " on host " + places[r]->host;
}

}  // namespace detail
}  // namespace dist
}  // namespace kindling
