// JsonLogger: lines parsed back field by field (a strict little parser here, and Python's json
// module as a second, independent judge of validity), escaping, non-finite values, numbers
// that read back exactly, several events on one handler, append and truncate.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kindling/engine/engine.h"
#include "kindling/handlers/loggers/json_logger.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/multiprocess.h"

namespace {

namespace kh = kindling::handlers;
using kindling::engine::Engine;
using kindling::engine::Events;
using kindling::engine::Value;

struct Field {
  enum class Kind { kString, kNumber, kNull } kind = Kind::kNull;
  std::string text;  // the decoded string, or the number as written
};
using Object = std::map<std::string, Field>;

// One flat JSON object with string, number and null values, strictly (RFC 8259 escapes, no
// raw control characters, no duplicate keys, nothing after the object). Throws on anything else.
Object parse_object(const std::string& line) {
  std::size_t i = 0;
  const auto fail = [&](const std::string& what) {
    throw std::runtime_error(what + " at offset " + std::to_string(i) + " of: " + line);
  };
  const auto expect = [&](char c) {
    if (i >= line.size() || line[i] != c) fail(std::string("expected '") + c + "'");
    ++i;
  };
  const auto read_string = [&]() {
    expect('"');
    std::string out;
    for (;;) {
      if (i >= line.size()) fail("unterminated string");
      const char c = line[i++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= line.size()) fail("unterminated escape");
      switch (line[i++]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          const unsigned long code = std::stoul(line.substr(i, 4), nullptr, 16);
          if (code >= 0x80) fail("a \\u escape beyond ASCII (the writer escapes only control characters)");
          out += static_cast<char>(code);
          i += 4;
          break;
        }
        default: fail("bad escape");
      }
    }
  };
  Object object;
  expect('{');
  for (;;) {
    const std::string key = read_string();
    expect(':');
    Field field;
    if (line.compare(i, 4, "null") == 0) {
      i += 4;
    } else if (i < line.size() && line[i] == '"') {
      field.kind = Field::Kind::kString;
      field.text = read_string();
    } else {
      const std::size_t end = line.find_first_of(",}", i);
      if (end == std::string::npos || end == i) fail("missing value");
      field.kind = Field::Kind::kNumber;
      field.text = line.substr(i, end - i);
      std::size_t used = 0;
      std::stod(field.text, &used);
      if (used != field.text.size() || field.text.find_first_of("in") != std::string::npos) fail("not a JSON number");
      i = end;
    }
    if (!object.emplace(key, field).second) fail("duplicate key " + key);
    if (i < line.size() && line[i] == ',') {
      ++i;
      continue;
    }
    expect('}');
    break;
  }
  if (i != line.size()) fail("text after the object");
  return object;
}

std::vector<Object> read_objects(const std::string& path) {
  std::ifstream in(path);
  std::vector<Object> objects;
  for (std::string line; std::getline(in, line);) objects.push_back(parse_object(line));
  return objects;
}

// Python's json module, with NaN / Infinity refused and the file decoded as strict UTF-8.
const char* const kStrictJsonCheck =
    "import json, sys\n"
    "def refuse(name):\n"
    "    raise ValueError('not JSON: ' + name)\n"
    "count = 0\n"
    "for line in open(sys.argv[1], encoding='utf-8', errors='strict'):\n"
    "    assert isinstance(json.loads(line, parse_constant=refuse), dict)\n"
    "    count += 1\n"
    "print(count)\n";

TEST(JsonLoggerTest, LinesParseBackWithEveryField) {
  const kindling::testing::TempDir folder("json");
  const std::string dir = folder.path(),
                    path = dir + "/logs/scalars.jsonl";  // logs/ is made
  const double before = kindling::testing::unix_now();
  const std::string weird = "line\nbreak \\ \"quoted\"\ttab \x01 \x1f caf\xC3\xA9 bad\xFF";
  {
    kh::JsonLogger json(path);
    ASSERT_TRUE(json.active());
    Engine trainer([](Engine&, const int& b) -> Value { return static_cast<double>(b); });
    json.attach_output_handler(trainer, Events::ITERATION_COMPLETED.every(2) | Events::COMPLETED, "train", {},
                               [](const Value& out) {
                                 return std::map<std::string, double>{{"out", out.number()}};
                               });
    std::vector<int> data{1, 2, 3};
    trainer.run(data, 2);  // iterations 2, 4, 6 see 2, 1, 3; COMPLETED (epoch 2) sees 3
    json.add_scalar(weird, "nan", std::numeric_limits<double>::quiet_NaN(), 3);
    json.add_scalar("", "plus_inf", std::numeric_limits<double>::infinity(), 4);
    json.add_scalar("", "minus_inf", -std::numeric_limits<double>::infinity(), -5);
    json.add_scalar("", "third", 1.0 / 3.0, 6);
    json.add_scalar("", "tiny", 1e-300, 7);
    json.add_scalar("", "big", 1e300, 8);
  }  // closed (fsync) by the destructor
  const double after = kindling::testing::unix_now();
  const std::vector<Object> lines = read_objects(path);
  ASSERT_EQ(lines.size(), 10u);
  const std::vector<std::pair<int64_t, double>> outputs{{2, 2}, {4, 1}, {6, 3}, {2, 3}};
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Object& o = lines[i];
    EXPECT_EQ(o.size(), 5u);
    EXPECT_EQ(o.at("tag").text, "train");
    EXPECT_EQ(o.at("name").text, "out");
    EXPECT_EQ(o.at("step").text, std::to_string(outputs[i].first));
    EXPECT_EQ(std::stod(o.at("value").text), outputs[i].second);
  }
  const Object& nan = lines[4];
  EXPECT_EQ(nan.at("tag").text, "line\nbreak \\ \"quoted\"\ttab \x01 \x1f caf\xC3\xA9 bad\xEF\xBF\xBD");  // U+FFFD
  EXPECT_EQ(nan.at("value").kind, Field::Kind::kNull);
  EXPECT_EQ(nan.at("non_finite").text, "nan");
  EXPECT_EQ(lines[5].at("non_finite").text, "inf");
  EXPECT_EQ(lines[6].at("non_finite").text, "-inf");
  EXPECT_EQ(lines[6].at("step").text, "-5");
  EXPECT_EQ(lines[7].at("value").text, "0.3333333333333333");  // shortest form that reads back exactly
  EXPECT_EQ(std::stod(lines[7].at("value").text), 1.0 / 3.0);
  EXPECT_EQ(std::stod(lines[8].at("value").text), 1e-300);
  EXPECT_EQ(std::stod(lines[9].at("value").text), 1e300);
  for (const Object& o : lines) {
    EXPECT_EQ(o.count("non_finite"), o.at("value").kind == Field::Kind::kNull ? 1u : 0u);
    EXPECT_EQ(o.at("tag").kind, Field::Kind::kString);
    EXPECT_GE(std::stod(o.at("wall_time").text), before - 1e-3);
    EXPECT_LE(std::stod(o.at("wall_time").text), after + 1e-3);
  }
  const auto python = kindling::testing::run_command({KINDLING_PYTHON, "-c", kStrictJsonCheck, path});
  EXPECT_TRUE(python.ok()) << kindling::testing::describe({python});
  EXPECT_EQ(python.out, "10\n");

  {
    kh::JsonLogger appended(path, /*append=*/true);
    appended.add_scalar("", "appended", 1.0, 1);
  }
  EXPECT_EQ(read_objects(path).size(), 11u);
  {
    kh::JsonLogger fresh(path);  // append false: emptied
    fresh.add_scalar("", "fresh", 1.0, 1);
    fresh.close();
    ::testing::internal::CaptureStderr();
    fresh.add_scalar("", "late", 1.0, 2);  // dropped with one warning, not thrown
    fresh.add_scalar("t", "later", 1.0, 3);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(kindling::testing::occurrences(err, "was logged after close()"), 1) << err;
    EXPECT_NE(err.find("JsonLogger: 'late' was logged after close()"), std::string::npos) << err;
  }
  ASSERT_EQ(read_objects(path).size(), 1u);
  EXPECT_EQ(read_objects(path)[0].at("name").text, "fresh");
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(JsonLoggerTest, QuoteEscapesAsRfc8259AndReplacesBrokenUtf8) {
  EXPECT_EQ(kh::JsonLogger::quote(""), "\"\"");
  EXPECT_EQ(kh::JsonLogger::quote("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(kh::JsonLogger::quote("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(kh::JsonLogger::quote(std::string("\x00\x01\x1f\x7f", 4)), "\"\\u0000\\u0001\\u001f\x7f\"");
  EXPECT_EQ(kh::JsonLogger::quote("\xE2\x82\xAC \xF0\x9F\x98\x80"), "\"\xE2\x82\xAC \xF0\x9F\x98\x80\"");  // kept
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(kh::JsonLogger::quote("\xC3("), "\"" + fffd + "(\"");                      // truncated sequence
  EXPECT_EQ(kh::JsonLogger::quote("\xC0\xAF"), "\"" + fffd + fffd + "\"");             // overlong '/'
  EXPECT_EQ(kh::JsonLogger::quote("\xED\xA0\x80"), "\"" + fffd + fffd + fffd + "\"");  // a surrogate
  EXPECT_EQ(kh::JsonLogger::quote("\x80"), "\"" + fffd + "\"");                        // stray continuation
}

TEST(JsonLoggerTest, EmptyPathIsRefused) {
  try {
    kh::JsonLogger json("");
    FAIL() << "no error for an empty path";
  } catch (const kindling::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("path is an empty string"), std::string::npos) << e.what();
  }
}

}  // namespace
