// What a user writes to reach and tune the elastic rendezvous (see rendezvous_conf.h).
#include "supervisor/rendezvous/rendezvous_conf.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>

#include "common/env.h"

namespace kindling {
namespace supervisor {

std::string parse_endpoint(const std::string& text, std::string& host, int& port) {
  std::string name = text, number;
  if (!text.empty() && text[0] == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos) return "'" + text + "' lacks its ']'";
    name = text.substr(1, close - 1);
    if (close + 1 < text.size() && text[close + 1] == ':') number = text.substr(close + 2);
  } else if (const auto colon = text.rfind(':'); colon != std::string::npos && text.find(':') == colon) {
    name = text.substr(0, colon);
    number = text.substr(colon + 1);
    if (number.empty()) return "'" + text + "' has an empty port";
  }
  if (name.empty()) return "needs a host, got '" + text + "'";
  if (!number.empty()) {
    const bool digits = number.size() <= 5 && number.find_first_not_of("0123456789") == std::string::npos;
    const int value = digits ? std::stoi(number) : 0;
    if (value < 1 || value > 65535) return "port must be between 1 and 65535, got '" + number + "'";
    port = value;
  }
  host = name;
  return {};
}

std::string parse_etcd_members(const std::string& text, std::vector<std::string>& members) {
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    std::string host;
    int port = 2379;
    const std::string problem = parse_endpoint(text.substr(start, comma - start), host, port);
    if (!problem.empty()) return problem;
    const bool v6 = host.find(':') != std::string::npos;
    members.push_back((v6 ? "[" + host + "]" : host) + ":" + std::to_string(port));
    start = comma + 1;
  }
  return {};
}

namespace {

using std::chrono::milliseconds;

// A setting of seconds: its value into `target`, or what is wrong with it.
std::function<std::string(const std::string&)> seconds_into(milliseconds& target, const std::string& key,
                                                            double least) {
  return [&target, key, least](const std::string& value) -> std::string {
    const auto s = ::kindling::detail::parse_seconds(value);
    if (!s || *s < least) {
      return key + " expects seconds (a number from " + (least > 0 ? "0.01" : "0") + " to " +
             std::to_string(static_cast<long long>(::kindling::detail::kMaxSeconds)) + ", about 115 days), got '" +
             value + "'";
    }
    target = milliseconds(static_cast<long long>(std::llround(*s * 1000)));
    return {};
  };
}

// A setting of a whole number from `least` to `most`.
std::function<std::string(const std::string&)> count_into(int& target, const std::string& key, int least, int most,
                                                          const std::string& unit) {
  return [&target, key, least, most, unit](const std::string& value) -> std::string {
    const bool digits = !value.empty() && value.size() <= 9 && value.find_first_not_of("0123456789") == value.npos;
    const int n = digits ? std::stoi(value) : -1;
    if (n < least || n > most) {
      return key + " expects a whole number of " + unit + " from " + std::to_string(least) + " to " +
             std::to_string(most) + ", got '" + value + "'";
    }
    target = n;
    return {};
  };
}

}  // namespace

std::string apply_rdzv_conf(const std::string& text, ElasticAgentOptions& options) {
  RendezvousSettings& r = options.rendezvous;
  // keep_alive_interval's least value: the agents' questions go on a thread that also watches
  // the workers; faster than every 10 ms they would be most of its work.
  const std::map<std::string, std::function<std::string(const std::string&)>> settings = {
      {"join_timeout", seconds_into(r.join_timeout, "join_timeout", 0)},
      {"last_call_timeout", seconds_into(r.last_call, "last_call_timeout", 0)},
      {"keep_alive_interval", seconds_into(r.keep_alive_interval, "keep_alive_interval", 0.01)},
      {"keep_alive_max_attempt", count_into(r.keep_alive_max_attempt, "keep_alive_max_attempt", 1, 100, "questions")},
      {"takeover_wait", seconds_into(r.rejoin_grace, "takeover_wait", 0)},
      {"lease", count_into(options.etcd_lease_seconds, "lease", 1, 3600, "seconds")},
  };
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const auto eq = item.find('=');
    const auto setting = settings.find(item.substr(0, eq));
    if (eq == std::string::npos && setting != settings.end()) return "'" + item + "' needs a value: " + item + "=V";
    if (setting == settings.end()) {
      std::string known;
      for (const auto& [key, apply] : settings) known += (known.empty() ? "" : ", ") + key;
      return "unknown setting '" + item + "' (known: " + known + ", each as K=V, separated by commas)";
    }
    const std::string problem = setting->second(item.substr(eq + 1));
    if (!problem.empty()) return problem;
  }
  return {};
}

}  // namespace supervisor
}  // namespace kindling
