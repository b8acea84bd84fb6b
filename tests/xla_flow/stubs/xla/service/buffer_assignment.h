// Test stand-in for xla::BufferAllocation and its Slice: an allocation's index, size, color and
// the properties BufferAssignment gives it (see ../../README.md).
#ifndef XLA_FLOW_STUB_XLA_SERVICE_BUFFER_ASSIGNMENT_H_
#define XLA_FLOW_STUB_XLA_SERVICE_BUFFER_ASSIGNMENT_H_

#include <cstdint>

namespace xla {

// XLA's ShapeIndex (xla/shape_util.h), which the stand-in never reads.
struct ShapeIndex {};

class BufferAllocation {
 public:
  using Index = int64_t;
  BufferAllocation(Index index, int64_t size, int64_t color)
      : index_(index), size_(size), color_(color) {}
  Index index() const { return index_; }
  int64_t size() const { return size_; }
  int64_t color() const { return color_; }

  bool is_thread_local() const { return is_thread_local_; }
  void set_is_thread_local(bool is_thread_local) { is_thread_local_ = is_thread_local; }
  bool is_tuple() const { return is_tuple_; }
  void set_is_tuple(bool is_tuple) { is_tuple_ = is_tuple; }
  bool is_constant() const { return is_constant_; }
  void set_constant(bool is_constant) { is_constant_ = is_constant; }
  bool maybe_live_out() const { return maybe_live_out_; }
  void set_maybe_live_out(bool value) { maybe_live_out_ = value; }
  bool is_entry_computation_parameter() const { return is_entry_computation_parameter_; }
  bool is_parameter_aliased_with_output() const { return is_parameter_aliased_with_output_; }
  void set_entry_computation_parameter(int64_t parameter_number, ShapeIndex param_shape_index,
                                       bool parameter_aliased_with_output) {
    (void)parameter_number;
    (void)param_shape_index;
    is_entry_computation_parameter_ = true;
    is_parameter_aliased_with_output_ = parameter_aliased_with_output;
  }
  // As XLA's: entry parameters not aliased with an output, and constants.
  bool is_readonly() const {
    return (is_entry_computation_parameter_ && !is_parameter_aliased_with_output_) || is_constant_;
  }

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
  int64_t color_;
  bool is_thread_local_ = false;
  bool is_tuple_ = false;
  bool is_constant_ = false;
  bool maybe_live_out_ = false;
  bool is_entry_computation_parameter_ = false;
  bool is_parameter_aliased_with_output_ = false;
};

}  // namespace xla

#endif  // XLA_FLOW_STUB_XLA_SERVICE_BUFFER_ASSIGNMENT_H_
