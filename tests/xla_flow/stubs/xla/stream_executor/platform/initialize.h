// Test stand-in for StreamExecutor's module initializer (see ../../../README.md): runs `body` once
// at static initialization, as XLA's default implementation does.
#ifndef XLA_FLOW_STUB_STREAM_EXECUTOR_PLATFORM_INITIALIZE_H_
#define XLA_FLOW_STUB_STREAM_EXECUTOR_PLATFORM_INITIALIZE_H_

#define STREAM_EXECUTOR_REGISTER_MODULE_INITIALIZER(name, body) \
  [[maybe_unused]] static const bool name##_module_initialized = [] { \
    body;                                                                \
    return true;                                                         \
  }();

#endif  // XLA_FLOW_STUB_STREAM_EXECUTOR_PLATFORM_INITIALIZE_H_
