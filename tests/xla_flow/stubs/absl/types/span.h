// Test stand-in for absl::Span over a std::vector or nothing, and absl::MakeSpan (see
// ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_TYPES_SPAN_H_
#define XLA_FLOW_STUB_ABSL_TYPES_SPAN_H_

#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <vector>

namespace absl {

template <typename T>
class Span {

 public:
  Span() = default;
  template <typename A, typename U = T, typename = std::enable_if_t<std::is_const<U>::value>>
  Span(const std::vector<std::remove_const_t<T>, A>& v)  // NOLINT: implicit, as absl's
      : data_(v.data()), size_(v.size()) {}
  // Over a braced list, for the call it is an argument of, as absl's (which also keeps GCC's
  // warning that the list dies with that call quiet).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
  template <typename U = T, typename = std::enable_if_t<std::is_const<U>::value>>
  Span(std::initializer_list<std::remove_const_t<T>> v)  // NOLINT: implicit, as absl's
      : data_(v.begin()), size_(v.size()) {}
#pragma GCC diagnostic pop
  template <typename A, typename U = T, typename = std::enable_if_t<!std::is_const<U>::value>>
  explicit Span(std::vector<T, A>& v) : data_(v.data()), size_(v.size()) {}
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

template <typename T, typename A>
Span<T> MakeSpan(std::vector<T, A>& v) {
  return Span<T>(v);
}

}  // namespace absl

#endif  // XLA_FLOW_STUB_ABSL_TYPES_SPAN_H_
