// kindling::engine::Value: construction, typed access with clear errors, and text for logs.
#include "kindling/engine/value.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "kindling/error.h"

namespace kindling {
namespace engine {
namespace {

std::string describe_tensor(const at::Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  if (t.numel() == 1 && t.device().is_cpu()) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.4g", t.item<double>());
    return text;
  }
  std::ostringstream out;
  out << "tensor" << t.sizes() << " " << c10::toString(t.scalar_type());
  return out.str();
}

}  // namespace

Value::Value(at::Tensor tensor) : kind_(Kind::kTensor), tensor_(std::move(tensor)) {}

Value::Value(std::initializer_list<at::Tensor> tuple) : kind_(Kind::kTuple), tuple_(tuple) {}

Value Value::tuple(std::vector<at::Tensor> tensors) {
  Value v;
  v.kind_ = Kind::kTuple;
  v.tuple_ = std::move(tensors);
  return v;
}

Value Value::named(std::map<std::string, at::Tensor> tensors) {
  Value v;
  v.kind_ = Kind::kNamed;
  v.named_ = std::move(tensors);
  return v;
}

const char* Value::kind_name(Kind kind) {
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kNumber: return "number";
    case Kind::kTensor: return "tensor";
    case Kind::kTuple: return "tuple";
    case Kind::kNamed: return "named";
  }
  return "?";
}

double Value::number() const {
  if (kind_ == Kind::kNumber) return number_;
  KINDLING_CHECK(kind_ == Kind::kTensor && tensor_.defined() && tensor_.numel() == 1,
                 "kindling::engine::Value::number: this value is ",
                 kind_ == Kind::kTensor ? describe_tensor(tensor_) : std::string("a ") + kind_name(kind_),
                 ", not a number or a one-element tensor; use tensor(), [i] or [\"name\"] instead");
  return tensor_.item<double>();
}

at::Tensor Value::tensor() const {
  if (kind_ == Kind::kTensor) return tensor_;
  if (kind_ == Kind::kNumber) return at::scalar_tensor(number_, at::kDouble);
  KINDLING_CHECK(false, "kindling::engine::Value::tensor: this value is a ", kind_name(kind_), " (", to_string(),
                 "), not one tensor; use [i] for a tuple or [\"name\"] for named tensors");
  return {};
}

const at::Tensor& Value::operator[](std::size_t i) const {
  KINDLING_CHECK(kind_ == Kind::kTuple, "kindling::engine::Value[", i, "]: this value is a ", kind_name(kind_), " (",
                 to_string(), "), not a tuple of tensors",
                 kind_ == Kind::kNamed ? "; use [\"name\"] for named tensors" : "");
  KINDLING_CHECK(i < tuple_.size(), "kindling::engine::Value[", i, "]: the tuple has only ", tuple_.size(), " tensors");
  return tuple_[i];
}

const at::Tensor& Value::operator[](const std::string& key) const {
  KINDLING_CHECK(kind_ == Kind::kNamed, "kindling::engine::Value[\"", key, "\"]: this value is a ", kind_name(kind_),
                 " (", to_string(), "), not named tensors");
  auto it = named_.find(key);
  if (it == named_.end()) {
    std::string keys;
    for (const auto& kv : named_) keys += (keys.empty() ? "" : ", ") + kv.first;
    KINDLING_CHECK(false, "kindling::engine::Value[\"", key, "\"]: no tensor named '", key, "'; it has: ", keys);
  }
  return it->second;
}

std::size_t Value::size() const {
  switch (kind_) {
    case Kind::kNone: return 0;
    case Kind::kNumber:
    case Kind::kTensor: return 1;
    case Kind::kTuple: return tuple_.size();
    case Kind::kNamed: return named_.size();
  }
  return 0;
}

std::string Value::to_string() const {
  switch (kind_) {
    case Kind::kNone: return "none";
    case Kind::kNumber: {
      char text[32];
      std::snprintf(text, sizeof(text), "%.4g", number_);
      return text;
    }
    case Kind::kTensor: return describe_tensor(tensor_);
    case Kind::kTuple: {
      std::string out = "(";
      for (std::size_t i = 0; i < tuple_.size(); ++i) out += (i ? ", " : "") + describe_tensor(tuple_[i]);
      return out + ")";
    }
    case Kind::kNamed: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : named_) {
        out += (first ? "" : ", ") + kv.first + ": " + describe_tensor(kv.second);
        first = false;
      }
      return out + "}";
    }
  }
  return "?";
}

std::ostream& operator<<(std::ostream& out, const Value& value) { return out << value.to_string(); }

Value& ValueMap::at(const std::string& key) {
  auto it = find(key);
  if (it == end()) missing(key);
  return it->second;
}

const Value& ValueMap::at(const std::string& key) const {
  auto it = find(key);
  if (it == end()) missing(key);
  return it->second;
}

void ValueMap::missing(const std::string& key) const {
  std::string present;
  for (const auto& kv : *this) present += (present.empty() ? "'" : ", '") + kv.first + "'";
  throw UsageError(what_ + " has no '" + key + "'; it holds " + (present.empty() ? std::string("nothing") : present) +
                   ". Check the spelling; a metric appears once the engine it is attached to has completed an "
                   "epoch (run the evaluator first), a user attribute once a handler has set it.");
}

Value apply_to_tensor(const Value& value, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  switch (value.kind()) {
    case Value::Kind::kTensor: return fn(value.tensor());
    case Value::Kind::kTuple: {
      std::vector<at::Tensor> out;
      for (const at::Tensor& t : value.tuple_elements()) out.push_back(fn(t));
      return Value::tuple(std::move(out));
    }
    case Value::Kind::kNamed: {
      std::map<std::string, at::Tensor> out;
      for (const auto& [name, t] : value.named_elements()) out.emplace(name, fn(t));
      return Value::named(std::move(out));
    }
    default: return value;
  }
}

Value convert_tensor(const Value& value, std::optional<c10::Device> device, bool non_blocking) {
  if (!device) return value;
  return apply_to_tensor(value, [&](const at::Tensor& t) { return t.to(*device, non_blocking); });
}

at::Tensor to_onehot(const at::Tensor& indices, int64_t num_classes) {
  const char* who = "kindling::engine::to_onehot";
  KINDLING_CHECK(indices.defined() && indices.dim() >= 1 && !at::isFloatingType(indices.scalar_type()) &&
                     !at::isComplexType(indices.scalar_type()) && indices.scalar_type() != at::kBool,
                 who, ": indices must be an integer tensor of shape (N, ...), got ",
                 indices.defined() ? Value(indices).to_string() : std::string("an undefined tensor"));
  KINDLING_CHECK(num_classes >= 1, who, ": num_classes must be at least 1, got ", num_classes);
  if (indices.numel() > 0) {
    const int64_t low = indices.min().item<int64_t>(), high = indices.max().item<int64_t>();
    KINDLING_CHECK(low >= 0 && high < num_classes, who, ": indices must lie in [0, ", num_classes, "), got values in [",
                   low, ", ", high, "]");
  }
  std::vector<int64_t> shape = indices.sizes().vec();
  shape.insert(shape.begin() + 1, num_classes);
  at::Tensor onehot = at::zeros(shape, indices.options().dtype(at::kByte));
  return onehot.scatter_(1, indices.to(at::kLong).unsqueeze(1), 1);
}

}  // namespace engine
}  // namespace kindling
