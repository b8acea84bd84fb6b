// Test stand-in for HIP's hip_runtime.h: the stream handle type and the stream flags the series'
// stream hooks and their test name, as HIP declares them (see ../../../README.md).
#ifndef XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_
#define XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_

typedef struct ihipStream_t* hipStream_t;

#define hipStreamDefault 0x00
#define hipStreamNonBlocking 0x01

#endif  // XLA_FLOW_STUB_ROCM_INCLUDE_HIP_HIP_RUNTIME_H_
