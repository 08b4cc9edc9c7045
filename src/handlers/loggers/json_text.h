// Internal to kindling's handlers: text for the JSON-lines logger and the HTML report's
// embedded data: UTF-8 checking, RFC 8259 string quoting, and numbers in the shortest form
// that reads back exactly. The handlers write their records value by value and need only
// these two pieces, so they do not build nlohmann-json documents (the library the launchers'
// error files use, src/launch/error_file.cpp): its dump() throws on ill-formed UTF-8 unless
// told otherwise, where a metric name or log line must still come out (as U+FFFD), and it
// writes a whole double as "3.0" where these files have always had "3". Standard library only.
#pragma once

#include <cstddef>
#include <string>

namespace kindling {
namespace handlers {
namespace detail {

/// The length of the well-formed UTF-8 sequence starting at text[i] (1 to 4), or 0 when the
/// bytes there are not one (a stray continuation byte, an overlong form, a surrogate, a
/// code point above U+10FFFF, a truncated sequence).
std::size_t utf8_sequence_length(const std::string& text, std::size_t i);
/// Whether all of `text` is well-formed UTF-8.
bool is_utf8(const std::string& text);

/// `text` as a JSON string (RFC 8259: quoted; \" \\ \n \r \t \b \f, other control
/// characters as \u00XX); bytes that are not well-formed UTF-8 become U+FFFD, so the result
/// is always valid JSON.
std::string json_quote(const std::string& text);

/// The shortest decimal text that reads back to the same double (std::to_chars: independent
/// of the C locale, so never "0,5"), e.g. "0.1", "1e-05", "-3". `value` must be finite.
std::string shortest_number(double value);

}  // namespace detail
}  // namespace handlers
}  // namespace kindling
