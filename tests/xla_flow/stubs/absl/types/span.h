// Test stand-in for absl::Span, read-only, over a std::vector or nothing (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_TYPES_SPAN_H_
#define XLA_FLOW_STUB_ABSL_TYPES_SPAN_H_

#include <cstddef>
#include <type_traits>
#include <vector>

namespace absl {

template <typename T>
class Span {
  static_assert(std::is_const<T>::value, "the stand-in only has read-only spans");

 public:
  Span() = default;
  template <typename A>
  Span(const std::vector<std::remove_const_t<T>, A>& v)  // NOLINT: implicit, as absl's
      : data_(v.data()), size_(v.size()) {}
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }
  T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_TYPES_SPAN_H_
