// The xla_flow programs' checks: CHECK counts a failed expectation and goes on, OK stops the
// program when a library call the flow needs fails. Each program returns failures != 0.
#ifndef XLA_FLOW_CHECK_H
#define XLA_FLOW_CHECK_H

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "rocm_cmdbuf.hpp"

namespace {

int failures = 0;

#define CHECK(cond, ...)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      ++failures;                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fputc('\n', stderr);                                                   \
    }                                                                             \
  } while (0)

// A library call the flow needs: stop on failure.
#define OK(expr)                                                                           \
  do {                                                                                     \
    rcb::Status s_ = (expr);                                                               \
    if (!s_.ok()) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// Says that the checks `what` did not run on this backend and why, as the Rust tests' SKIPPED
// line does (`SKIPPED <program>: <what> (<why>)`); ci/gpu-run.sh lists them by name.
inline void Skipped(const char* what, const char* why) {
  std::printf("SKIPPED %s: %s (%s)\n", program_invocation_short_name, what, why);
}

// Loads the library's runtime and says which one the program runs on.
inline void Announce(const char* program) {
  rcb_runtime_info info{};
  OK(rcb::LoadRuntime(&info));
  std::printf("%s: %s backend, %s\n", program, info.backend == RCB_BACKEND_HIP ? "hip" : "cuda", info.library);
}

// The program's exit status, said: 0 when every CHECK held.
inline int Finish(const char* program) {
  if (failures != 0) {
    std::printf("%s: %d check(s) failed\n", program, failures);
    return 1;
  }
  std::printf("%s: all checks passed\n", program);
  return 0;
}

}  // namespace

#endif  // XLA_FLOW_CHECK_H
