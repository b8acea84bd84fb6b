// Test stand-in for se::gpu::GpuCommandBuffer: its node handle type (the bridge converts it) and,
// for rocm_cmdbuf_command_buffer.cc and its test, the public operations that test records
// through and every private virtual that file overrides, declared as XLA declares them at both
// targets (see ../../../../README.md). What it models of XLA's base class, minimally: each
// operation checks the state as XLA's does (kCreate to create a command, kUpdate to update one,
// not kFinalized to finalize), passes the dependencies' node handles to the node virtual and
// keeps the command; Finalize runs PrepareFinalization, then InstantiateGraph the first time a
// primary command buffer is finalized, and counts it as XLA's NotifyExecCreated does; Update
// runs CheckCanBeUpdated and needs a finalized command buffer; Submit launches a primary one.
// No control flow, kernel launch, moved child or DNN graph command.
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_GPU_GPU_COMMAND_BUFFER_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_GPU_GPU_COMMAND_BUFFER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "xla/stream_executor/bit_pattern.h"
#include "xla/stream_executor/command_buffer.h"
#include "xla/stream_executor/device_address.h"
#include "xla/stream_executor/dnn.h"
#include "xla/stream_executor/kernel.h"
#include "xla/stream_executor/kernel_args.h"
#include "xla/stream_executor/launch_dim.h"
#include "xla/stream_executor/platform.h"
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"

namespace stream_executor::gpu {

class GpuCommandBuffer : public CommandBuffer {
  struct GraphNodeHandleOpaque;
  struct GraphConditionalOpaque;

 public:
  enum class ConditionType { kIf, kWhile };
  using GraphNodeHandle = GraphNodeHandleOpaque*;
  using GraphConditionalHandle = GraphConditionalOpaque*;
  struct GraphConditionalNodeHandle {
    GraphNodeHandle handle;
    std::unique_ptr<GpuCommandBuffer> command_buffer;
  };
  struct GpuCommand : public CommandBuffer::Command {
    explicit GpuCommand(GraphNodeHandle handle) : handle(handle) {}
    GraphNodeHandle handle = nullptr;
  };

  // XLA's keeps `executor` to create the nested command buffers of commands it does not model.
  GpuCommandBuffer(Mode mode, StreamExecutor* executor) : mode_(mode) { (void)executor; }

  absl::StatusOr<const Command*> CreateEmptyCmd(absl::Span<const Command* const> dependencies,
                                                StreamPriority priority) override {
    (void)priority;
    return Append(CheckInState(State::kCreate), [&] { return CreateEmptyNode(Nodes(dependencies)); });
  }
  absl::StatusOr<const Command*> CreateChildCommand(
      const CommandBuffer& nested, absl::Span<const Command* const> dependencies) override {
    return Append(CheckInState(State::kCreate),
                  [&] { return CreateClonedChildNode(Nodes(dependencies), nested); });
  }
  absl::Status UpdateChildCommand(const Command* command, const CommandBuffer& nested) override {
    if (absl::Status in_state = CheckInState(State::kUpdate); !in_state.ok()) return in_state;
    return UpdateClonedChildNode(Handle(command), nested);
  }
  absl::StatusOr<const Command*> CreateMemcpyD2D(
      DeviceAddressBase* dst, const DeviceAddressBase& src, uint64_t size,
      absl::Span<const Command* const> dependencies) override {
    return Append(CheckInState(State::kCreate),
                  [&] { return CreateMemcpyD2DNode(Nodes(dependencies), *dst, src, size); });
  }
  absl::Status UpdateMemcpyD2D(const Command* command, DeviceAddressBase* dst,
                               const DeviceAddressBase& src, uint64_t size) override {
    if (absl::Status in_state = CheckInState(State::kUpdate); !in_state.ok()) return in_state;
    return UpdateMemcpyD2DNode(Handle(command), *dst, src, size);
  }
  absl::StatusOr<const Command*> CreateMemset(
      DeviceAddressBase* dst, BitPattern bit_pattern, size_t num_elements,
      absl::Span<const Command* const> dependencies) override {
    return Append(CheckInState(State::kCreate), [&] {
      return CreateMemsetNode(Nodes(dependencies), *dst, bit_pattern, num_elements);
    });
  }
  absl::Status UpdateMemset(const Command* command, DeviceAddressBase* dst,
                            const BitPattern& bit_pattern, size_t num_elements) override {
    if (absl::Status in_state = CheckInState(State::kUpdate); !in_state.ok()) return in_state;
    return UpdateMemsetNode(Handle(command), *dst, bit_pattern, num_elements);
  }

  absl::Status Finalize() override {
    if (absl::Status not_finalized = CheckNotFinalized(); !not_finalized.ok()) return not_finalized;
    if (absl::Status prepared = PrepareFinalization(); !prepared.ok()) return prepared;
    if (mode_ == Mode::kPrimary && state_ == State::kCreate) {
      if (absl::Status instantiated = InstantiateGraph(); !instantiated.ok()) return instantiated;
      NotifyExecCreated();
    }
    state_ = State::kFinalized;
    return absl::OkStatus();
  }
  absl::Status Update() override {
    if (absl::Status updatable = CheckCanBeUpdated(); !updatable.ok()) return updatable;
    if (state_ != State::kFinalized) {
      return absl::InternalError("Command buffer has to be finalized first before it can be updated");
    }
    state_ = State::kUpdate;
    return absl::OkStatus();
  }
  absl::Status Submit(Stream* stream) override {
    if (mode_ != Mode::kPrimary) {
      return absl::InvalidArgumentError("Can't submit non-primary command buffer for execution");
    }
    return LaunchGraph(stream);
  }
  Mode mode() const override { return mode_; }
  State state() const override { return state_; }

 protected:
  static int64_t AliveExecs() { return alive_execs().load(); }
  static int64_t NotifyExecCreated() { return alive_execs().fetch_add(1); }
  static int64_t NotifyExecDestroyed() { return alive_execs().fetch_sub(1) - 1; }
  absl::Status CheckNotFinalized() {
    if (state_ == State::kFinalized) {
      return absl::InternalError("Command can't be added to a command buffer after it was finalized");
    }
    return absl::OkStatus();
  }
  absl::Status CheckInState(State state) {
    if (state_ != state) return absl::InternalError("Command buffer in another state");
    return absl::OkStatus();
  }
  virtual absl::Status CheckCanBeUpdated() = 0;

 private:
  static std::atomic<int64_t>& alive_execs() {
    static std::atomic<int64_t> execs{0};
    return execs;
  }
  template <typename CreateNode>
  absl::StatusOr<const Command*> Append(absl::Status in_state, CreateNode create) {
    if (!in_state.ok()) return in_state;
    absl::StatusOr<GraphNodeHandle> handle = create();
    if (!handle.ok()) return handle.status();
    commands_.push_back(std::make_unique<GpuCommand>(*handle));
    return static_cast<const Command*>(commands_.back().get());
  }
  static std::vector<GraphNodeHandle> Nodes(absl::Span<const Command* const> dependencies) {
    std::vector<GraphNodeHandle> handles;
    for (const Command* dependency : dependencies) handles.push_back(Handle(dependency));
    return handles;
  }
  static GraphNodeHandle Handle(const Command* command) {
    return static_cast<const GpuCommand*>(command)->handle;
  }

  virtual absl::StatusOr<GraphNodeHandle> CreateSetCaseConditionNode(
      absl::Span<const GraphConditionalHandle> conditionals, DeviceAddress<uint8_t> index,
      bool index_is_bool, int32_t batch_offset, bool enable_conditional_default,
      absl::Span<const GraphNodeHandle> dependencies) = 0;
  virtual absl::Status UpdateSetCaseConditionNode(
      GraphNodeHandle handle, absl::Span<const GraphConditionalHandle> conditionals,
      DeviceAddress<uint8_t> index, bool index_is_bool, int32_t batch_offset,
      bool enable_conditional_default) = 0;
  virtual absl::StatusOr<GraphNodeHandle> CreateSetWhileConditionNode(
      GraphConditionalHandle conditional, DeviceAddress<bool> predicate,
      absl::Span<const GraphNodeHandle> dependencies) = 0;
  virtual absl::Status UpdateSetWhileConditionNode(GraphNodeHandle handle,
                                                   GraphConditionalHandle conditional,
                                                   DeviceAddress<bool> predicate) = 0;
  virtual absl::StatusOr<GraphNodeHandle> CreateEmptyNode(
      absl::Span<const GraphNodeHandle> dependencies) = 0;
  virtual absl::StatusOr<GraphConditionalNodeHandle> CreateConditionalNode(
      absl::Span<const GraphNodeHandle> dependencies, GraphConditionalHandle conditional,
      ConditionType type) = 0;
  virtual absl::StatusOr<GraphNodeHandle> CreateMemsetNode(
      absl::Span<const GraphNodeHandle> dependencies, DeviceAddressBase destination,
      BitPattern bit_pattern, size_t num_elements) = 0;
  virtual absl::Status UpdateMemsetNode(GraphNodeHandle node_handle, DeviceAddressBase destination,
                                        BitPattern bit_pattern, size_t num_elements) = 0;
  virtual absl::StatusOr<GraphNodeHandle> CreateMemcpyD2DNode(
      absl::Span<const GraphNodeHandle> dependencies, DeviceAddressBase destination,
      DeviceAddressBase source, uint64_t size) = 0;
  virtual absl::Status UpdateMemcpyD2DNode(GraphNodeHandle node_handle,
                                           DeviceAddressBase destination,
                                           DeviceAddressBase source, uint64_t size) = 0;
  virtual absl::Status PopulateDnnGraphNode(dnn::DnnGraph&, Stream&,
                                            absl::Span<DeviceAddressBase> operands) = 0;
  virtual absl::Status UpdateDnnGraphNode(dnn::DnnGraph&, Stream&,
                                          absl::Span<DeviceAddressBase> operands,
                                          GraphNodeHandle) = 0;
  virtual absl::StatusOr<GraphNodeHandle> CreateClonedChildNode(
      absl::Span<const GraphNodeHandle> dependencies, const CommandBuffer& nested) = 0;
  virtual absl::StatusOr<GraphNodeHandle> CreateMovedChildNode(
      absl::Span<const GraphNodeHandle> dependencies, CommandBuffer* nested) = 0;
  virtual absl::Status UpdateClonedChildNode(GraphNodeHandle node_handle,
                                             const CommandBuffer& nested) = 0;
  virtual absl::StatusOr<GraphNodeHandle> CreateKernelNode(
      absl::Span<const GraphNodeHandle> dependencies, StreamPriority priority,
      const ThreadDim& threads, const BlockDim& blocks,
      const std::optional<ClusterDim>& cluster_dims, const Kernel& kernel,
      const KernelArgsPackedArrayBase& args) = 0;
  virtual absl::Status UpdateKernelNode(GraphNodeHandle node_handle, const ThreadDim& threads,
                                        const BlockDim& blocks,
                                        const std::optional<ClusterDim>& cluster_dims,
                                        const Kernel& kernel,
                                        const KernelArgsPackedArrayBase& args) = 0;
  virtual absl::Status LaunchGraph(Stream* stream) = 0;
  virtual absl::StatusOr<size_t> GetNodeCount() const = 0;
  virtual absl::Status PrepareFinalization() = 0;
  virtual absl::StatusOr<GraphConditionalHandle> CreateConditionalHandle() = 0;
  virtual absl::Status WriteGraphToDotFile(absl::string_view path) = 0;
  virtual absl::Status InstantiateGraph() = 0;

  Mode mode_;
  State state_ = State::kCreate;
  std::vector<std::unique_ptr<Command>> commands_;
};

}  // namespace stream_executor::gpu

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_GPU_GPU_COMMAND_BUFFER_H_
