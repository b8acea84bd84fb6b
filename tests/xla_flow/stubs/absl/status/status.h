// Test stand-in for absl::Status: a code and a message (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STATUS_STATUS_H_
#define XLA_FLOW_STUB_ABSL_STATUS_STATUS_H_

#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace absl {

enum class StatusCode {
  kOk,
  kUnknown,
  kInvalidArgument,
  kDeadlineExceeded,
  kNotFound,
  kResourceExhausted,
  kFailedPrecondition,
  kUnimplemented,
  kInternal,
  kUnavailable,
};

class Status {
 public:
  Status() = default;
  // A message alone, as the loader's TSL stand-in makes them: OK when empty.
  explicit Status(std::string message)
      : code_(message.empty() ? StatusCode::kOk : StatusCode::kUnknown), message_(std::move(message)) {}
  Status(StatusCode code, std::string_view message) : code_(code), message_(message) {}
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  std::string_view message() const { return message_; }
  void IgnoreError() const {}
  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }
  friend std::ostream& operator<<(std::ostream& os, const Status& s) {
    return os << (s.ok() ? "OK" : "error ") << static_cast<int>(s.code_) << ": " << s.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status NotFoundError(std::string_view message) {
  return Status(StatusCode::kNotFound, message.empty() ? std::string_view("not found") : message);
}
inline Status InternalError(std::string_view message) { return Status(StatusCode::kInternal, message); }
inline Status InvalidArgumentError(std::string_view message) {
  return Status(StatusCode::kInvalidArgument, message);
}
inline Status DeadlineExceededError(std::string_view message) {
  return Status(StatusCode::kDeadlineExceeded, message);
}
inline Status ResourceExhaustedError(std::string_view message) {
  return Status(StatusCode::kResourceExhausted, message);
}
inline Status FailedPreconditionError(std::string_view message) {
  return Status(StatusCode::kFailedPrecondition, message);
}
inline Status UnimplementedError(std::string_view message) {
  return Status(StatusCode::kUnimplemented, message);
}
inline Status UnavailableError(std::string_view message) {
  return Status(StatusCode::kUnavailable, message);
}

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_STATUS_STATUS_H_
