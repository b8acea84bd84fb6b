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
  // The pattern repeated over 32 bits, as XLA's RocmCommandBuffer sets a memset node's value.
  uint32_t GetPatternBroadcastedToUint32() const {
    return std::visit(
        [](auto value) {
          uint32_t broadcast = 0;
          for (size_t i = 0; i < sizeof(uint32_t) / sizeof(value); ++i) {
            broadcast |= static_cast<uint32_t>(value) << (8 * sizeof(value) * i);
          }
          return broadcast;
        },
        static_cast<const std::variant<uint8_t, uint16_t, uint32_t>&>(*this));
  }
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_BIT_PATTERN_H_
