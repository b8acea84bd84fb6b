// Stand-in for Abseil's absl/functional/any_invocable.h: absl::AnyInvocable for the signatures
// the series and its stand-ins use: called as an rvalue (se::Stream's host callbacks), holding a
// callable that may be move-only, and called as an lvalue (se::CommandBuffer::Trace's function),
// here a std::function (the callables the tests pass are copyable; see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_FUNCTIONAL_ANY_INVOCABLE_H_
#define XLA_FLOW_STUB_ABSL_FUNCTIONAL_ANY_INVOCABLE_H_

#include <functional>
#include <memory>
#include <utility>

namespace absl {

template <typename Signature>
class AnyInvocable;

template <typename R, typename... Args>
class AnyInvocable<R(Args...)> : public std::function<R(Args...)> {
 public:
  using std::function<R(Args...)>::function;
};

template <typename R, typename... Args>
class AnyInvocable<R(Args...) &&> {
 public:
  AnyInvocable() = default;
  template <typename F>
  AnyInvocable(F f)  // NOLINT(google-explicit-constructor): implicit, as Abseil's
      : f_([held = std::make_shared<F>(std::move(f))](Args... args) -> R {
          return std::move(*held)(std::forward<Args>(args)...);
        }) {}
  explicit operator bool() const { return static_cast<bool>(f_); }
  R operator()(Args... args) && { return f_(std::forward<Args>(args)...); }

 private:
  std::function<R(Args...)> f_;
};

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_FUNCTIONAL_ANY_INVOCABLE_H_
