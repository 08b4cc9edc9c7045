// One rendezvous round's codec and torchrun's variables (see round.h).
#include "common/round.h"

#include <cerrno>
#include <cstdlib>
#include <set>
#include <sstream>

namespace kindling {
namespace detail {

namespace {

// The fields, in the order they are written.
template <typename Visit>
void each_field(Round& r, Visit visit) {
  visit("round", &r.round, nullptr);
  visit("restarts", &r.restarts, nullptr);
  visit("node_rank", &r.node_rank, nullptr);
  visit("nnodes", &r.nnodes, nullptr);
  visit("rank_offset", &r.rank_offset, nullptr);
  visit("world_size", &r.world_size, nullptr);
  visit("master_addr", nullptr, &r.master_addr);
  visit("master_port", &r.master_port, nullptr);
  visit("hosts", nullptr, &r.hosts);
  visit("instance", nullptr, &r.instance);
}

bool read_number(const std::string& text, int& out) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < -2147483647L || v > 2147483647L) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

std::string encode_round(const Round& round, char separator) {
  Round copy = round;
  std::string text;
  each_field(copy, [&](const char* name, const int* number, const std::string* word) {
    if (!text.empty()) text += separator;
    text += std::string(name) + "=" + (number != nullptr ? std::to_string(*number) : *word);
  });
  if (separator == '\n') text += '\n';
  return text;
}

std::string decode_round(const std::string& text, Round& round) {
  std::istringstream words(text);
  Round read;
  std::set<std::string> seen;
  std::string wrong;
  for (std::string word; words >> word;) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = word.substr(0, eq), value = word.substr(eq + 1);
    each_field(read, [&](const char* field, int* number, std::string* text_field) {
      if (name != field) return;
      seen.insert(name);
      if (text_field != nullptr) {
        *text_field = value;
      } else if (!read_number(value, *number) && wrong.empty()) {
        wrong = "the field " + name + "='" + value + "' is not a number";
      }
    });
  }
  if (!wrong.empty()) return wrong;
  std::string missing;
  each_field(read, [&](const char* field, const int*, const std::string*) {
    if (!seen.count(field)) missing += (missing.empty() ? "" : ", ") + std::string(field);
  });
  if (!missing.empty()) return "the fields " + missing + " are missing";
  round = read;
  return {};
}

std::string round_line(const Round& round, const std::string& lost) {
  return "ROUND " + encode_round(round, ' ') + (lost.empty() ? "" : " lost:" + lost);
}

bool parse_round_line(const std::string& line, Round& round, std::string& lost) {
  if (line.rfind("ROUND ", 0) != 0) return false;
  const auto left_out = line.find(" lost:");
  lost = left_out == std::string::npos ? "" : line.substr(left_out + 6);
  return decode_round(line.substr(6, left_out == std::string::npos ? std::string::npos : left_out - 6), round).empty();
}

std::vector<std::pair<std::string, std::string>> round_variables(const Round& round, int local, int nproc) {
  const std::string rank = std::to_string(round.rank_offset + local), world = std::to_string(round.world_size);
  return {{"RANK", rank},
          {"LOCAL_RANK", std::to_string(local)},
          {"WORLD_SIZE", world},
          {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
          {"GROUP_RANK", std::to_string(round.node_rank)},
          {"GROUP_WORLD_SIZE", std::to_string(round.nnodes)},
          {"MASTER_ADDR", round.master_addr},
          {"MASTER_PORT", std::to_string(round.master_port)}};
}

}  // namespace detail
}  // namespace kindling
