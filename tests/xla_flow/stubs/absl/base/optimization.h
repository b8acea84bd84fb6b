// Test stand-in for Abseil's branch hints (see ../../README.md).
#ifndef XLA_FLOW_STUB_ABSL_BASE_OPTIMIZATION_H_
#define XLA_FLOW_STUB_ABSL_BASE_OPTIMIZATION_H_

#define ABSL_PREDICT_TRUE(x) __builtin_expect(static_cast<bool>(x), true)
#define ABSL_PREDICT_FALSE(x) __builtin_expect(static_cast<bool>(x), false)

#endif  // XLA_FLOW_STUB_ABSL_BASE_OPTIMIZATION_H_
