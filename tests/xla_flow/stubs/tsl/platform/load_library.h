// Test stand-in for TSL's dynamic loading (tsl/platform/load_library.h; see ../../README.md):
// what XLA's Linux implementation (xla/tsl/platform/default/load_library.cc) does, dlopen with
// RTLD_NOW | RTLD_LOCAL and dlsym on that handle.
#ifndef XLA_FLOW_STUB_TSL_PLATFORM_LOAD_LIBRARY_H_
#define XLA_FLOW_STUB_TSL_PLATFORM_LOAD_LIBRARY_H_

#include <dlfcn.h>

#include "absl/status/status.h"

namespace tsl::internal {

inline absl::Status LoadDynamicLibrary(const char* library_filename, void** handle) {
  *handle = dlopen(library_filename, RTLD_NOW | RTLD_LOCAL);
  if (*handle == nullptr) {
    const char* error = dlerror();
    return absl::NotFoundError(error != nullptr ? error : "(null error message)");
  }
  return absl::OkStatus();
}

inline absl::Status GetSymbolFromLibrary(void* handle, const char* symbol_name, void** symbol) {
  *symbol = handle != nullptr ? dlsym(handle, symbol_name) : nullptr;
  if (*symbol == nullptr) {
    const char* error = dlerror();
    return absl::NotFoundError(error != nullptr ? error : "(null error message)");
  }
  return absl::OkStatus();
}

}  // namespace tsl::internal

#endif  // XLA_FLOW_STUB_TSL_PLATFORM_LOAD_LIBRARY_H_
