// Test stand-in for se::ThreadDim, se::BlockDim and se::ClusterDim: three dimensions each (see
// ../../../README.md).
#ifndef XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_LAUNCH_DIM_H_
#define XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_LAUNCH_DIM_H_

#include <cstdint>

namespace stream_executor {

struct Dim3D {
  uint64_t x, y, z;
};

struct ThreadDim : Dim3D {
  explicit ThreadDim(uint64_t x = 1, uint64_t y = 1, uint64_t z = 1) : Dim3D{x, y, z} {}
};

struct BlockDim : Dim3D {
  explicit BlockDim(uint64_t x = 1, uint64_t y = 1, uint64_t z = 1) : Dim3D{x, y, z} {}
};

struct ClusterDim : Dim3D {
  explicit ClusterDim(uint64_t x = 1, uint64_t y = 1, uint64_t z = 1) : Dim3D{x, y, z} {}
};

}  // namespace stream_executor

#endif  // XLA_FLOW_STUB_XLA_STREAM_EXECUTOR_LAUNCH_DIM_H_
