// Compiles the installed C++ wrapper when the PREFIX has one (otherwise the C header, from C++)
// and calls into the library through it.
#ifndef ROCM_CMDBUF_AVAILABLE
#error "ROCM_CMDBUF_AVAILABLE is not defined by @rocm_cmdbuf//:rocm_cmdbuf"
#endif

#include <cstdio>
#include <cstring>

#if __has_include("rocm_cmdbuf.hpp")
#include "rocm_cmdbuf.hpp"
static const char* Describe(rcb_status code) { return rcb::StatusStr(code); }
static const char* const kHeader = "rocm_cmdbuf.hpp";
#else
#include "rocm_cmdbuf.h"
static const char* Describe(rcb_status code) { return rcb_status_str(code); }
static const char* const kHeader = "rocm_cmdbuf.h (the PREFIX has no rocm_cmdbuf.hpp)";
#endif

int main() {
  const char* desc = Describe(RCB_STATUS_INVALID_HANDLE);
  bool ok = std::strncmp(desc, "RCB_STATUS_INVALID_HANDLE", 25) == 0;
  std::printf("%s from C++ through %s: \"%s\"\n", ok ? "ok:  " : "FAIL:", kHeader, desc);
  return ok ? 0 : 1;
}
