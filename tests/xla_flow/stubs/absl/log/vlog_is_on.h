// Test stand-in for Abseil's absl/log/vlog_is_on.h (see ../../README.md): VLOG_IS_ON lives in a
// header of its own in Abseil (20260526.0, both targets), not in absl/log/log.h.
#ifndef XLA_FLOW_STUB_ABSL_LOG_VLOG_IS_ON_H_
#define XLA_FLOW_STUB_ABSL_LOG_VLOG_IS_ON_H_

// Every verbose level is on: VLOG keeps its lines too.
#define VLOG_IS_ON(level) true

#endif  // XLA_FLOW_STUB_ABSL_LOG_VLOG_IS_ON_H_
