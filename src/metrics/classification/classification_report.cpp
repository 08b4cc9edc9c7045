// ClassificationReport: ignite's report from per-class Precision, Recall and Fbeta, and its
// JSON text as Python's json.dumps writes it (written here: nlohmann-json formats numbers and
// escapes non-ASCII text differently from Python, and the comparison with ignite is exact).
#include "kindling/metrics/classification_report.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

#include "kindling/error.h"
#include "kindling/metrics/fbeta.h"
#include "kindling/metrics/precision_recall.h"

namespace kindling {
namespace metrics {
namespace {

const char* const kReportWho = "kindling::metrics::ClassificationReport";

const char* const kFields[] = {"precision", "recall", nullptr};  // then "f<beta>-score"

// "f<beta>-score" (snprintf: GCC 12 warns falsely, -Wstringop-overflow, on "f" + std::to_string
// here in C++20).
std::string score_key(int beta) {
  char key[32];
  std::snprintf(key, sizeof(key), "f%d-score", beta);
  return key;
}

std::string label_of(const std::vector<std::string>& labels, std::size_t i) {
  return labels.empty() ? std::to_string(i) : labels[i];
}

// Python's repr of a float (what json.dumps writes): the shortest round-trip digits, fixed
// notation for decimal exponents from -4 to 15 ("0.0001", "1.0"), else "1e-05", "1.5e+16";
// json.dumps's NaN, Infinity and -Infinity.
std::string python_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  char buffer[64];
  const auto end = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific).ptr;
  std::string text(buffer, end);  // "-1.2345e-05"
  const bool negative = text[0] == '-';
  if (negative) text.erase(0, 1);
  const std::size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits = text.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  // Appended piece by piece: GCC 12 warns falsely (-Wstringop-overflow) on "." + std::string
  // chains here in C++20.
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    const auto point = static_cast<std::size_t>(exponent + 1);
    if (exponent < 0) {
      out.append("0.").append(static_cast<std::size_t>(-exponent - 1), '0').append(digits);
    } else if (point >= digits.size()) {
      out.append(digits).append(point - digits.size(), '0').append(".0");
    } else {
      out.append(digits, 0, point).append(".").append(digits, point, std::string::npos);
    }
  } else {
    const int magnitude = std::abs(exponent);
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    out.append(exponent < 0 ? "e-" : "e+").append(magnitude < 10 ? "0" : "").append(std::to_string(magnitude));
  }
  return out;
}

// json.dumps of a string (ensure_ascii): \" \\ \n \r \t \b \f, other control characters and
// every non-ASCII code point as \uXXXX (UTF-16 surrogate pairs above U+FFFF).
std::string python_string(const std::string& text) {
  static const char* const kHex = "0123456789abcdef";
  const auto unicode = [](unsigned code) {
    std::string u = "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) u += kHex[(code >> shift) & 0xF];
    return u;
  };
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    static const std::map<char, const char*> escapes{{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"},
                                                     {'\t', "\\t"}, {'\b', "\\b"},  {'\f', "\\f"}};
    if (escapes.count(static_cast<char>(c))) {
      out += escapes.at(static_cast<char>(c));
    } else if (c < 0x20) {
      out += unicode(c);
    } else if (c < 0x80) {
      out += static_cast<char>(c);
    } else {  // a UTF-8 sequence (labels are the caller's text: read leniently)
      const int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
      unsigned code = c & (0x3F >> extra);
      for (int k = 0; k < extra && i + 1 < text.size(); ++k) code = (code << 6) | (text[++i] & 0x3F);
      if (code > 0xFFFF) {
        code -= 0x10000;
        out += unicode(0xD800 + (code >> 10)) + unicode(0xDC00 + (code & 0x3FF));
      } else {
        out += unicode(code);
      }
    }
  }
  return out + "\"";
}

}  // namespace

struct ClassificationReport::Parts {
  Function function;
  std::vector<std::shared_ptr<Metric>> args;
};

namespace {

MetricsLambda::Function report_function(int beta, std::vector<std::string> labels) {
  const std::string score = score_key(beta);
  return [score, labels = std::move(labels)](const std::vector<engine::Value>& v) -> engine::Value {
    const at::Tensor recall = v[0].tensor().to(at::kDouble), precision = v[1].tensor().to(at::kDouble);
    const at::Tensor f = v[2].tensor().to(at::kDouble);
    KINDLING_CHECK(precision.dim() == 1, kReportWho,
                   ": binary input gives one precision, not one per class (ignite's ClassificationReport fails "
                   "there too); give scores of shape (N, 2) for two classes, or is_multilabel for (N, C) 0/1 targets");
    const auto classes = static_cast<std::size_t>(precision.size(0));
    KINDLING_CHECK(labels.empty() || labels.size() >= classes, kReportWho, ": ", labels.size(),
                   " labels were given for ", classes, " classes; name every class");
    std::map<std::string, at::Tensor> out;
    const auto put = [&](const std::string& label, const at::Tensor& p, const at::Tensor& r, const at::Tensor& s) {
      out[label + "/precision"] = p;
      out[label + "/recall"] = r;
      out[label + "/" + score] = s;
    };
    for (std::size_t i = 0; i < classes; ++i) {
      const auto c = static_cast<int64_t>(i);
      put(label_of(labels, i), precision[c], recall[c], f[c]);
    }
    put("macro avg", precision.mean(), recall.mean(), f.mean());
    return engine::Value::named(std::move(out));
  };
}

}  // namespace

ClassificationReport::Parts ClassificationReport::make_parts(int beta, bool is_multilabel,
                                                             const std::vector<std::string>& labels,
                                                             OutputTransform output_transform,
                                                             std::optional<c10::Device> device) {
  KINDLING_CHECK(beta >= 1, kReportWho, ": beta must be at least 1 (ignite's int), got ", beta);
  const c10::Device where = device.value_or(c10::Device(c10::kCPU));
  auto precision = std::make_shared<Precision>(output_transform, Precision::Average::kFalse, is_multilabel, where);
  auto recall = std::make_shared<Recall>(output_transform, Recall::Average::kFalse, is_multilabel, where);
  auto fbeta = Fbeta(static_cast<double>(beta), false, precision, recall);
  return {report_function(beta, labels), {recall, precision, fbeta}};
}

ClassificationReport::ClassificationReport(int beta, bool is_multilabel, std::vector<std::string> labels,
                                           OutputTransform output_transform, std::optional<c10::Device> device)
    : ClassificationReport(make_parts(beta, is_multilabel, labels, std::move(output_transform), device), beta, labels) {
}

ClassificationReport::ClassificationReport(const Parts& parts, int beta, std::vector<std::string> labels)
    : MetricsLambda(parts.function, parts.args), beta_(beta), labels_(std::move(labels)) {}

std::string ClassificationReport::json(const engine::Value& report) const {
  const std::string score = score_key(beta_);
  const std::size_t entries = report.is_named() ? report.named_elements().size() : 0;
  KINDLING_CHECK(entries >= 6 && entries % 3 == 0, kReportWho, "::json: ", report.to_string(),
                 " is not a value this report computed (named entries '<label>/precision', ...)");
  std::vector<std::string> order;
  for (std::size_t i = 0; i + 1 < entries / 3; ++i) order.push_back(label_of(labels_, i));
  order.push_back("macro avg");
  std::string out = "{";
  for (const std::string& label : order) {
    out += (out.size() > 1 ? ", " : "") + python_string(label) + ": {";
    std::string fields;
    for (const char* const* field = kFields;; ++field) {
      const std::string name = *field ? *field : score;
      KINDLING_CHECK(report.contains(label + "/" + name), kReportWho, "::json: the value has no '", label, "/", name,
                     "'; give the value this report computed");
      fields += (fields.empty() ? "" : ", ") + python_string(name) + ": " +
                python_number(report[label + "/" + name].item<double>());
      if (!*field) break;
    }
    out += fields + "}";
  }
  return out + "}";
}

}  // namespace metrics
}  // namespace kindling
