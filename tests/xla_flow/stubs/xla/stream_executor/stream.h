// Test stand-in for se::Stream, which the series' interfaces pass by pointer only (see
// ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_H_

namespace stream_executor {
class Stream;
}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_STREAM_H_
