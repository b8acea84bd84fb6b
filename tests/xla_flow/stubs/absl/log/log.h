// Test stand-in for Abseil's logging macros (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_LOG_LOG_H_
#define XLA_FLOW_STUB_ABSL_LOG_LOG_H_

#include <atomic>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace xla_flow_log {

// Every line logged, as "SEVERITY: text".
inline std::vector<std::string> lines;

class Line {
 public:
  explicit Line(const char* severity) { text_ << severity << ": "; }
  ~Line() { lines.push_back(text_.str()); }
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  template <typename T>
  Line& operator<<(const T& value) {
    text_ << value;
    return *this;
  }

 private:
  std::ostringstream text_;
};

}  // namespace xla_flow_log

#define LOG(severity) ::xla_flow_log::Line(#severity)
// Only the first `n` times this line is reached.
#define LOG_FIRST_N(severity, n)                                                          \
  if (static std::atomic<int> xla_flow_log_count{0}; xla_flow_log_count++ >= (n)) { \
  } else                                                                                \
    LOG(severity)
#define VLOG(level) ::xla_flow_log::Line("VLOG" #level)

#endif  // XLA_FLOW_STUB_ABSL_LOG_LOG_H_
