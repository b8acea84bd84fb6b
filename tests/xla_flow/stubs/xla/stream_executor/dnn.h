// Test stand-in for se::dnn: DnnGraph declared only, for the command buffer operations that take
// one (see ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_DNN_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_DNN_H_

namespace stream_executor::dnn {

class DnnGraph;

}  // namespace stream_executor::dnn

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_DNN_H_
