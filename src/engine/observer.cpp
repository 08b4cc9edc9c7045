// handler_name(): a printable name for an engine's handler, from its C++ type (the observers'
// reports: kindling's time profilers).
#include "kindling/engine/observer.h"

#include <c10/util/Type.h>

#include <string>

namespace kindling {
namespace engine {

namespace {

// The demangled type without "(anonymous namespace)::", argument lists "(...)" and template
// argument lists "<...>": "f(int)::{lambda(Engine&)#1}" becomes "f::{lambda#1}".
std::string short_type_name(std::string name) {
  const std::string anonymous = "(anonymous namespace)::";
  for (std::size_t at = name.find(anonymous); at != std::string::npos; at = name.find(anonymous)) {
    name.erase(at, anonymous.size());
  }
  std::string out;
  int parens = 0, angles = 0;
  for (char c : name) {
    if (c == '(') ++parens;
    if (c == '<') ++angles;
    if (parens == 0 && angles == 0) out += c;
    if (c == ')' && parens > 0) --parens;
    if (c == '>' && angles > 0) --angles;
  }
  const std::size_t first = out.find_first_not_of(' '), last = out.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : out.substr(first, last - first + 1);
}

}  // namespace

std::string handler_name(const HandlerInfo& handler) {
  if (handler.type != nullptr) {
    std::string name = short_type_name(c10::demangle(handler.type->name()));
    if (!name.empty()) return name;
  }
  return "handler #" + std::to_string(handler.position) + " of " +
         (handler.attached_as != nullptr ? handler.attached_as->name() : std::string("its event"));
}

}  // namespace engine
}  // namespace kindling
