// Test stand-in for se::Kernel: its argument packing function, which a command buffer applies
// before recording a launch (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_H_

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "xla/stream_executor/kernel_args.h"

namespace stream_executor {

class Kernel {
 public:
  using KernelArgsPacking = std::function<absl::StatusOr<std::unique_ptr<KernelArgsPackedArrayBase>>(
      const Kernel& kernel, const KernelArgs& args)>;
  Kernel() = default;
  virtual ~Kernel() = default;
  const KernelArgsPacking& args_packing() const { return args_packing_; }
  void set_args_packing(KernelArgsPacking args_packing) { args_packing_ = std::move(args_packing); }

 private:
  KernelArgsPacking args_packing_;
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_KERNEL_H_
