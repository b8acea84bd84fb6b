// Test stand-in for se::BitPattern, a memset's element (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_BIT_PATTERN_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_BIT_PATTERN_H_

#include <cstddef>
#include <cstdint>
#include <variant>

namespace stream_executor {

class BitPattern : public std::variant<uint8_t, uint16_t, uint32_t> {
 public:
  using std::variant<uint8_t, uint16_t, uint32_t>::variant;

  size_t GetElementSize() const {
    return std::visit([](auto value) { return sizeof(value); },
                      static_cast<const std::variant<uint8_t, uint16_t, uint32_t>&>(*this));
  }
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_BIT_PATTERN_H_
