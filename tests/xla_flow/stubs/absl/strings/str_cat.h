// Test stand-in for absl::StrCat (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_STRINGS_STR_CAT_H_
#define XLA_FLOW_STUB_ABSL_STRINGS_STR_CAT_H_

#include <sstream>
#include <string>

namespace absl {

// Strings as they are, numbers in decimal, as Abseil's AlphaNum formats them.
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// StrCat's result appended to `*dest`.
template <typename... Args>
void StrAppend(std::string* dest, const Args&... args) {
  dest->append(StrCat(args...));
}

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_STRINGS_STR_CAT_H_
