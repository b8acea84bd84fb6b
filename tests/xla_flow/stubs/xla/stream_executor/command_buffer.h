// Test stand-in for se::CommandBuffer: its mode and state, the child command operations that the
// trace cache's RecordNestedCommand calls, the operations through which
// rocm_cmdbuf_command_buffer_test records (empty, memset, memcpy and child commands, finalize,
// update, submit) and the private Trace that file overrides, declared as XLA declares them at
// both targets (see ../../../README.md). Kernel launches and control flow are not declared: no test records them.
// A test's own command buffer (flags.cpp's) overrides only state().
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xla/stream_executor/bit_pattern.h"
#include "xla/stream_executor/device_address.h"
#include "xla/stream_executor/platform.h"

namespace stream_executor {

class Stream;

class CommandBuffer {
 public:
  enum class State { kCreate, kUpdate, kFinalized };
  enum class Mode { kPrimary, kNested };
  // A recorded command; opaque to its users.
  class Command {
   public:
    virtual ~Command() = default;
  };
  virtual ~CommandBuffer() = default;

  // XLA declares these pure; here each not overridden is an error if called (mode() says
  // primary), so that a test's command buffer defines only what it uses.
  virtual absl::StatusOr<const Command*> CreateEmptyCmd(
      absl::Span<const Command* const> dependencies,
      StreamPriority priority = StreamPriority::Default) {
    (void)dependencies;
    (void)priority;
    return NotModelled();
  }
  virtual absl::StatusOr<const Command*> CreateChildCommand(
      const CommandBuffer& nested, absl::Span<const Command* const> dependencies) {
    (void)nested;
    (void)dependencies;
    return NotModelled();
  }
  virtual absl::Status UpdateChildCommand(const Command* command, const CommandBuffer& nested) {
    (void)command;
    (void)nested;
    return NotModelled();
  }
  virtual absl::StatusOr<const Command*> CreateMemcpyD2D(
      DeviceAddressBase* dst, const DeviceAddressBase& src, uint64_t size,
      absl::Span<const Command* const> dependencies) {
    (void)dst;
    (void)src;
    (void)size;
    (void)dependencies;
    return NotModelled();
  }
  virtual absl::Status UpdateMemcpyD2D(const Command* command, DeviceAddressBase* dst,
                                       const DeviceAddressBase& src, uint64_t size) {
    (void)command;
    (void)dst;
    (void)src;
    (void)size;
    return NotModelled();
  }
  virtual absl::StatusOr<const Command*> CreateMemset(
      DeviceAddressBase* dst, BitPattern bit_pattern, size_t num_elements,
      absl::Span<const Command* const> dependencies) {
    (void)dst;
    (void)bit_pattern;
    (void)num_elements;
    (void)dependencies;
    return NotModelled();
  }
  virtual absl::Status UpdateMemset(const Command* command, DeviceAddressBase* dst,
                                    const BitPattern& bit_pattern, size_t num_elements) {
    (void)command;
    (void)dst;
    (void)bit_pattern;
    (void)num_elements;
    return NotModelled();
  }
  virtual absl::Status SetPriority(StreamPriority priority) {
    (void)priority;
    return NotModelled();
  }
  virtual absl::Status Submit(Stream* stream) {
    (void)stream;
    return absl::UnimplementedError("Not implemented for this command buffer.");
  }
  virtual absl::Status Finalize() { return NotModelled(); }
  virtual absl::Status Update() { return NotModelled(); }
  virtual Mode mode() const { return Mode::kPrimary; }
  virtual State state() const = 0;
  virtual std::string ToString() const { return "a stand-in command buffer"; }

 private:
  // Private, as in XLA: a command buffer is traced through these two only.
  friend class CommandBufferTest;
  friend class TraceCommandBufferFactory;
  virtual absl::Status Trace(Stream* stream, absl::AnyInvocable<absl::Status(Stream*)> function) {
    (void)stream;
    (void)function;
    return NotModelled();
  }
  static absl::Status NotModelled() {
    return absl::InternalError("this operation of se::CommandBuffer is not modelled");
  }
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_COMMAND_BUFFER_H_
