// Test stand-in for xla::BufferAllocation and its Slice (see ../../README.md).
#ifndef XLA_FLOW_STUB_XLA_SERVICE_BUFFER_ASSIGNMENT_H_
#define XLA_FLOW_STUB_XLA_SERVICE_BUFFER_ASSIGNMENT_H_

#include <cstdint>

namespace xla {

class BufferAllocation {
 public:
  using Index = int64_t;
  BufferAllocation(Index index, int64_t size, int64_t color) : index_(index), size_(size) {
    (void)color;
  }
  Index index() const { return index_; }
  int64_t size() const { return size_; }

  class Slice {
   public:
    Slice() = default;
    Slice(const BufferAllocation* allocation, int64_t offset, int64_t size)
        : allocation_(allocation), offset_(offset), size_(size) {}
    Index index() const { return allocation_->index(); }
    int64_t offset() const { return offset_; }
    int64_t size() const { return size_; }

   private:
    const BufferAllocation* allocation_ = nullptr;
    int64_t offset_ = 0;
    int64_t size_ = 0;
  };

 private:
  Index index_;
  int64_t size_;
};

}  // namespace xla

#endif  // XLA_FLOW_STUB_XLA_SERVICE_BUFFER_ASSIGNMENT_H_
