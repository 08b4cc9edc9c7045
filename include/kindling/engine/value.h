#pragma once
/// \file
/// kindling::engine::Value: what a process function returns (State::output) and what a
/// metric computes (State::metrics). One small type for both, readable without casts:
///
/// \code
///   return loss.item<double>();                  // a number
///   return {y_pred, y};                          // a tuple of tensors (what metrics read)
///   return Value::named({{"y_pred", y_pred}, {"y", y}, {"loss", loss}});
///   double acc = engine.state().metrics.at("accuracy").number();
/// \endcode
///
/// Metrics read (y_pred, y) from a tuple's first two tensors or from the names "y_pred"
/// and "y". Values are local to their process: nothing here communicates.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kindling/export.h"

namespace kindling {
namespace engine {

/// Nothing, a number, one tensor, a tuple of tensors, or named tensors. Accessors throw
/// kindling::UsageError naming the kind held when asked for another kind. Copies share
/// tensor storage (as at::Tensor copies do).
class KINDLING_API Value {
 public:
  enum class Kind { kNone, kNumber, kTensor, kTuple, kNamed };

  Value() = default;
  /// A number (any arithmetic type; stored as double).
  template <typename T, std::enable_if_t<std::is_arithmetic<T>::value, int> = 0>
  Value(T number) : kind_(Kind::kNumber), number_(static_cast<double>(number)) {}  // NOLINT: implicit on purpose
  /// One tensor.
  Value(at::Tensor tensor);  // NOLINT: implicit on purpose
  /// A tuple of tensors, e.g. {y_pred, y}.
  Value(std::initializer_list<at::Tensor> tuple);
  /// A tuple of tensors.
  static Value tuple(std::vector<at::Tensor> tensors);
  /// Named tensors, e.g. {{"y_pred", p}, {"y", y}}.
  static Value named(std::map<std::string, at::Tensor> tensors);

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_tuple() const { return kind_ == Kind::kTuple; }
  bool is_named() const { return kind_ == Kind::kNamed; }

  /// The number; a one-element tensor gives its value (this may synchronise with a GPU).
  /// Throws kindling::UsageError for other kinds.
  double number() const;
  /// The tensor; a number gives a 0-dim float64 tensor. Throws kindling::UsageError for
  /// a tuple, named tensors or nothing.
  at::Tensor tensor() const;
  /// Tuple element `i`. Throws kindling::UsageError when this is not a tuple or `i` is
  /// out of range.
  const at::Tensor& operator[](std::size_t i) const;
  /// Named tensor `key`. Throws kindling::UsageError when this is not named or has no such key.
  const at::Tensor& operator[](const std::string& key) const;
  /// The tuple's tensors (empty for other kinds).
  const std::vector<at::Tensor>& tuple_elements() const { return tuple_; }
  /// The named tensors (empty for other kinds).
  const std::map<std::string, at::Tensor>& named_elements() const { return named_; }
  /// Whether this is named and has `key`.
  bool contains(const std::string& key) const { return named_.count(key) > 0; }
  /// Elements of a tuple or named value; 1 for a number or tensor; 0 for nothing.
  std::size_t size() const;

  /// "0.2513" (numbers and one-element tensors, 4 significant decimals as ignite's logs),
  /// "tensor[3, 10] Float", "(tensor[..], tensor[..])", "{loss: 0.25, y: tensor[..]}", "none".
  std::string to_string() const;
  /// The kind as a word ("number", "tensor", "tuple", "named", "none").
  static const char* kind_name(Kind kind);

 private:
  Kind kind_ = Kind::kNone;
  double number_ = 0;
  at::Tensor tensor_;
  std::vector<at::Tensor> tuple_;
  std::map<std::string, at::Tensor> named_;
};

/// Writes value.to_string() (so that a Value prints with `<<`, e.g. in logs and tests).
KINDLING_API std::ostream& operator<<(std::ostream& out, const Value& value);

/// ignite.utils.apply_to_tensor: a Value of the same kind with `fn` applied to each tensor
/// `value` holds (the tensor; each of a tuple's, in order; each named one, under its name).
/// Nothing and numbers come back as they are. Local; throws what `fn` throws.
KINDLING_API Value apply_to_tensor(const Value& value, const std::function<at::Tensor(const at::Tensor&)>& fn);

/// ignite.utils.convert_tensor: each tensor of `value` moved with `tensor.to(device,
/// non_blocking)` (apply_to_tensor); `value` as it is when `device` is nullopt (ignite's
/// device=None). Local; throws what LibTorch's `to` throws (c10::Error for a CUDA device
/// where LibTorch has none). A batch of the loaders (kindling::data::Example) is moved by
/// kindling::engine::prepare_batch instead.
KINDLING_API Value convert_tensor(const Value& value, std::optional<c10::Device> device = std::nullopt,
                                  bool non_blocking = false);

/// ignite.utils.to_onehot: class indices (N, ...) of an integer type as a uint8 tensor
/// (N, num_classes, ...) on their device, with a 1 at each index along dimension 1 (the class
/// dimension second, as ignite's; LibTorch's one_hot puts it last and gives int64). Local;
/// throws kindling::UsageError for a non-integer or 0-dim tensor, num_classes < 1 or an index
/// outside [0, num_classes), naming the value.
KINDLING_API at::Tensor to_onehot(const at::Tensor& indices, int64_t num_classes);

/// Values by name: State::metrics and State::attributes. A std::map whose at() says what
/// is wrong when the name is missing: kindling::UsageError naming the key, the names
/// present and what usually causes it (std::map's at() says only "map::at").
class KINDLING_API ValueMap : public std::map<std::string, Value> {
 public:
  /// `what` names the map in errors, e.g. "state().metrics".
  explicit ValueMap(std::string what = "the map") : what_(std::move(what)) {}

  /// The value of `key`. Throws kindling::UsageError when there is none.
  Value& at(const std::string& key);
  /// The value of `key`. Throws kindling::UsageError when there is none.
  const Value& at(const std::string& key) const;

 private:
  [[noreturn]] void missing(const std::string& key) const;

  std::string what_;
};

}  // namespace engine
}  // namespace kindling
