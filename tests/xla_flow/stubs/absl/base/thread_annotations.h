// Test stand-in for Abseil's thread-safety annotations: no analysis here (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_BASE_THREAD_ANNOTATIONS_H_
#define XLA_FLOW_STUB_ABSL_BASE_THREAD_ANNOTATIONS_H_

#define ABSL_GUARDED_BY(x)

#endif  // XLA_FLOW_STUB_ABSL_BASE_THREAD_ANNOTATIONS_H_
