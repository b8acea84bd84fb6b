// Test stand-in for absl::StatusOr: a value or an error status (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STATUS_STATUSOR_H_
#define XLA_FLOW_STUB_ABSL_STATUS_STATUSOR_H_

#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"

namespace absl {

template <typename T>
class StatusOr {
 public:
  StatusOr() : status_(StatusCode::kUnknown, "no value") {}
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit, as absl's
  // From what converts to T (nullptr, a pointer to a derived class), as absl's.
  template <typename U, typename = std::enable_if_t<!std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_convertible_v<U, Status> &&
                                                    std::is_convertible_v<U, T>>>
  StatusOr(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_STATUS_STATUSOR_H_
