// Test stand-in for absl::Status: a message, empty when OK (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STATUS_STATUS_H_
#define XLA_FLOW_STUB_ABSL_STATUS_STATUS_H_

#include <string>
#include <string_view>
#include <utility>

namespace absl {

class Status {
 public:
  Status() = default;
  explicit Status(std::string message) : message_(std::move(message)) {}
  bool ok() const { return message_.empty(); }
  std::string_view message() const { return message_; }

 private:
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status NotFoundError(std::string_view message) {
  return Status(message.empty() ? std::string("not found") : std::string(message));
}

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_STATUS_STATUS_H_
