// etcd's v3 JSON gateway over libcurl (see etcd_client.h).
#include "supervisor/rendezvous/etcd_client.h"

#include <curl/curl.h>

#include <nlohmann/json.hpp>

#include <mutex>

namespace kindling {
namespace supervisor {

namespace {

// The gateway carries keys and values as base64 (protobuf's JSON mapping of bytes). Written
// here: libcurl's base64 is internal, and these few lines are not worth a package.
constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string to_base64(const std::string& in) {
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kDigits[(v >> s) & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kDigits[(v >> 18) & 63];
    out += kDigits[(v >> 12) & 63];
    out += i + 1 < in.size() ? kDigits[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string from_base64(const std::string& in) {
  std::string out;
  unsigned v = 0;
  int bits = 0;
  for (char c : in) {
    const char* at = std::char_traits<char>::find(kDigits, 64, c);
    if (at == nullptr) continue;  // '=' padding
    v = (v << 6) | static_cast<unsigned>(at - kDigits);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

std::size_t append_reply(char* data, std::size_t size, std::size_t count, void* reply) {
  static_cast<std::string*>(reply)->append(data, size * count);
  return size * count;
}

// The gateway writes 64-bit integers as strings (protobuf's JSON mapping).
int64_t number(const nlohmann::json& j, const char* field) {
  if (!j.contains(field)) return 0;
  const auto& v = j.at(field);
  return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
}

nlohmann::json parsed(const std::string& reply) {
  auto json = nlohmann::json::parse(reply, nullptr, false);
  if (json.is_discarded() || !json.is_object())
    throw EtcdError("an etcd endpoint answered something that is not etcd's JSON: " + reply.substr(0, 200), true);
  return json;
}

}  // namespace

EtcdClient::EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout) {
  if (endpoints_.empty()) throw std::invalid_argument("EtcdClient: no endpoint given");
  static std::once_flag once;  // curl_global_init is not thread-safe: once per process
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (curl_ == nullptr) throw EtcdError("libcurl could not make a handle (out of memory?)", false);
}

EtcdClient::~EtcdClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

// POSTs `body` to `path` on the member that answered last, then on each other one; throws
// EtcdError naming every member's problem when none answers.
std::string EtcdClient::call(const std::string& path, const std::string& body) {
  CURL* curl = static_cast<CURL*>(curl_);
  std::string problems;
  for (std::size_t tried = 0; tried < endpoints_.size(); ++tried) {
    const std::string& endpoint = endpoints_[current_];
    const std::string url = "http://" + endpoint + path;
    std::string reply;
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts: the process is threaded
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_.count()));
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_reply);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
    const CURLcode result = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (result == CURLE_OK && status == 200) {
      char* local = nullptr;
      if (curl_easy_getinfo(curl, CURLINFO_LOCAL_IP, &local) == CURLE_OK && local != nullptr) local_address_ = local;
      return reply;
    }
    if (result == CURLE_OK && status < 500) {
      throw EtcdError("etcd member " + endpoint + " refused " + path + " (HTTP " + std::to_string(status) +
                          "): " + reply.substr(0, 300),
                      true);
    }
    problems += (problems.empty() ? "" : "; ") + endpoint + ": " +
                (result != CURLE_OK ? std::string(curl_easy_strerror(result)) : "HTTP " + std::to_string(status));
    current_ = (current_ + 1) % endpoints_.size();
  }
  throw EtcdError("no etcd member answered (" + problems + ")", false);
}

bool EtcdProbe::etcd() const {
  if (status != 200) return false;
  const auto json = nlohmann::json::parse(reply, nullptr, false);
  return !json.is_discarded() && json.is_object() && json.contains("etcdserver");
}

EtcdProbe EtcdClient::probe(std::size_t index, std::chrono::milliseconds limit) {
  CURL* curl = static_cast<CURL*>(curl_);
  const std::string url = "http://" + endpoints_.at(index) + "/version";
  EtcdProbe p;
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(limit.count()));
  curl_easy_setopt(curl, CURLOPT_HTTP09_ALLOWED, 1L);  // a program that is not HTTP: its own first line
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_reply);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &p.reply);
  const CURLcode result = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &p.status);
  curl_off_t connect_us = 0;
  curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME_T, &connect_us);
  p.connected = connect_us > 0;
  if (result != CURLE_OK) p.error = curl_easy_strerror(result);
  p.reply = p.reply.substr(0, 300);
  return p;
}

std::optional<EtcdValue> EtcdClient::get(const std::string& key) {
  const auto reply = parsed(call("/v3/kv/range", nlohmann::json{{"key", to_base64(key)}}.dump()));
  if (!reply.contains("kvs") || reply["kvs"].empty()) return std::nullopt;
  const auto& kv = reply["kvs"][0];
  return EtcdValue{from_base64(kv.value("value", "")), number(kv, "mod_revision")};
}

void EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  nlohmann::json body{{"key", to_base64(key)}, {"value", to_base64(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  call("/v3/kv/put", body.dump());
}

bool EtcdClient::create(const std::string& key, const std::string& value, int64_t lease) {
  nlohmann::json put{{"key", to_base64(key)}, {"value", to_base64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  const nlohmann::json body{{"compare", {{{"key", to_base64(key)}, {"target", "CREATE"}, {"create_revision", "0"}}}},
                            {"success", {{{"request_put", put}}}}};
  return parsed(call("/v3/kv/txn", body.dump())).value("succeeded", false);
}

bool EtcdClient::remove_if_unchanged(const std::string& key, int64_t mod_revision) {
  const nlohmann::json body{
      {"compare", {{{"key", to_base64(key)}, {"target", "MOD"}, {"mod_revision", std::to_string(mod_revision)}}}},
      {"success", {{{"request_delete_range", {{"key", to_base64(key)}}}}}}};
  return parsed(call("/v3/kv/txn", body.dump())).value("succeeded", false);
}

int64_t EtcdClient::grant(int ttl_seconds) {
  const auto reply = parsed(call("/v3/lease/grant", nlohmann::json{{"TTL", ttl_seconds}}.dump()));
  const int64_t id = number(reply, "ID");
  if (id == 0) throw EtcdError("etcd granted no lease: " + reply.dump().substr(0, 300), true);
  return id;
}

bool EtcdClient::keep_alive(int64_t lease) {
  const auto reply = parsed(call("/v3/lease/keepalive", nlohmann::json{{"ID", std::to_string(lease)}}.dump()));
  // An expired lease is answered without a TTL (0, left out of the JSON).
  return reply.contains("result") && number(reply["result"], "TTL") > 0;
}

void EtcdClient::revoke(int64_t lease) {
  call("/v3/lease/revoke", nlohmann::json{{"ID", std::to_string(lease)}}.dump());
}

}  // namespace supervisor
}  // namespace kindling
