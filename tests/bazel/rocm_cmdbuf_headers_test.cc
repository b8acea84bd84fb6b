// Depends on @rocm_cmdbuf//:headers only, as XLA's targets do: the headers compile, with
// ROCM_CMDBUF_AVAILABLE defined, and nothing links the library. The program then opens it the way
// the patched XLA's loader does (dlopen of librocm_cmdbuf.so.0 from the loader's path, which
// ci/bazel-test.sh gives through LD_LIBRARY_PATH) and checks that the installed library answers
// with the header's version. RCB_EXPECTED_VERSION (environment, optional): the version the
// installed file name carries.
#ifndef ROCM_CMDBUF_AVAILABLE
#error "ROCM_CMDBUF_AVAILABLE is not defined by @rocm_cmdbuf//:headers"
#endif

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rocm_cmdbuf.hpp"

#define STR2(x) #x
#define STR(x) STR2(x)

static int failures = 0;

static void Check(bool ok, const char* what, const char* got) {
  std::printf("%s %s (got \"%s\")\n", ok ? "ok:  " : "FAIL:", what, got);
  if (!ok) ++failures;
}

int main() {
  // Not linked: not loaded before the program opens it.
  void* before = dlopen("librocm_cmdbuf.so.0", RTLD_NOW | RTLD_NOLOAD);
  Check(before == nullptr, "librocm_cmdbuf.so.0 is not loaded at start (no link dependency)",
        before == nullptr ? "not loaded" : "loaded");
  void* handle = dlopen("librocm_cmdbuf.so.0", RTLD_NOW | RTLD_LOCAL);
  const char* error = handle == nullptr ? dlerror() : nullptr;
  Check(handle != nullptr, "dlopen(\"librocm_cmdbuf.so.0\") from the loader's path", handle ? "opened" : error);
  if (handle == nullptr) return 1;
  using VersionFn = decltype(&rcb_version);
  auto version_fn = reinterpret_cast<VersionFn>(dlsym(handle, "rcb_version"));
  Check(version_fn != nullptr, "rcb_version resolved", version_fn ? "found" : "missing");
  if (version_fn == nullptr) return 1;
  const char* version = version_fn();
  const char* header = STR(RCB_VERSION_MAJOR) "." STR(RCB_VERSION_MINOR) "." STR(RCB_VERSION_PATCH);
  Check(std::strcmp(version, header) == 0, "the opened library's version equals the header's", version);
  const char* expected = std::getenv("RCB_EXPECTED_VERSION");
  if (expected != nullptr && *expected != '\0') {
    Check(std::strcmp(version, expected) == 0, "rcb_version() equals the installed file's version", version);
  }
  return failures == 0 ? 0 : 1;
}
