// Test stand-in for absl::FunctionRef: a borrowed callable (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_FUNCTIONAL_FUNCTION_REF_H_
#define XLA_FLOW_STUB_ABSL_FUNCTIONAL_FUNCTION_REF_H_

#include <utility>

namespace absl {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  FunctionRef(const F& f)  // NOLINT: implicit, as absl's
      : object_(&f), call_([](const void* object, Args... args) -> R {
          return (*static_cast<const F*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  const void* object_;
  R (*call_)(const void*, Args...);
};

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_FUNCTIONAL_FUNCTION_REF_H_
