#pragma once
// Internal to kindling/engine/engine.h: adapts user callables (process functions and event
// handlers) to the engine's type-erased signatures. Not part of the API; may change.

#include <any>
#include <exception>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "kindling/engine/value.h"
#include "kindling/export.h"

namespace kindling {
namespace engine {

class Engine;

namespace detail {

// The parameter and result types of a callable with one non-template operator().
template <typename T>
struct CallableTraits : CallableTraits<decltype(&T::operator())> {};
template <typename C, typename R, typename... A>
struct CallableTraits<R (C::*)(A...) const> {
  using result = R;
  using args = std::tuple<A...>;
};
template <typename C, typename R, typename... A>
struct CallableTraits<R (C::*)(A...)> : CallableTraits<R (C::*)(A...) const> {};
template <typename R, typename... A>
struct CallableTraits<R (*)(A...)> {
  using result = R;
  using args = std::tuple<A...>;
};
template <typename R, typename... A>
struct CallableTraits<R(A...)> : CallableTraits<R (*)(A...)> {};

/// Throws kindling::UsageError: the process function takes `wanted` but the data gave `got`.
[[noreturn]] KINDLING_API void throw_batch_type_error(const std::type_info& wanted, const std::type_info& got);

template <typename F>
std::function<Value(Engine&, const std::any&)> adapt_process_function(F f) {
  using Traits = CallableTraits<std::decay_t<F>>;
  static_assert(std::tuple_size<typename Traits::args>::value == 2,
                "kindling::engine::Engine: the process function must take (Engine&, const Batch&)");
  using Batch = std::decay_t<std::tuple_element_t<1, typename Traits::args>>;
  using Result = typename Traits::result;
  return [f = std::move(f)](Engine& engine, const std::any& batch) mutable -> Value {
    const Batch* b;
    if constexpr (std::is_same<Batch, std::any>::value) {
      b = &batch;
    } else {
      b = std::any_cast<Batch>(&batch);
      if (b == nullptr) throw_batch_type_error(typeid(Batch), batch.type());
    }
    if constexpr (std::is_void<Result>::value) {
      f(engine, *b);
      return Value();
    } else {
      return Value(f(engine, *b));
    }
  };
}

/// An event handler: called with the engine and, for EXCEPTION_RAISED, the exception.
struct Handler {
  std::function<void(Engine&, const std::exception_ptr&)> call;
  bool wants_exception = false;
  // The callable's type, for handler_name() (kindling/engine/observer.h); null for function
  // pointers and std::function, whose type does not say what they are.
  const std::type_info* type = nullptr;
};

template <typename F>
struct IsStdFunction : std::false_type {};
template <typename S>
struct IsStdFunction<std::function<S>> : std::true_type {};

template <typename F>
const std::type_info* handler_type() {
  if constexpr (std::is_pointer<F>::value || std::is_function<F>::value || IsStdFunction<F>::value) {
    return nullptr;
  } else {
    return &typeid(F);
  }
}

template <typename F>
Handler adapt_handler_call(F f) {
  if constexpr (std::is_invocable<F&, Engine&, const std::exception_ptr&>::value) {
    return Handler{[f = std::move(f)](Engine& e, const std::exception_ptr& x) mutable { f(e, x); }, true};
  } else if constexpr (std::is_invocable<F&, Engine&>::value) {
    return Handler{[f = std::move(f)](Engine& e, const std::exception_ptr&) mutable { f(e); }, false};
  } else {
    static_assert(std::is_invocable<F&>::value,
                  "kindling::engine: an event handler must be callable as (Engine&), () or, for "
                  "EXCEPTION_RAISED, (Engine&, std::exception_ptr)");
    return Handler{[f = std::move(f)](Engine&, const std::exception_ptr&) mutable { f(); }, false};
  }
}

template <typename F>
Handler adapt_handler(F f) {
  Handler h = adapt_handler_call(std::move(f));
  h.type = handler_type<F>();
  return h;
}

}  // namespace detail
}  // namespace engine
}  // namespace kindling
