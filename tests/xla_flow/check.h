// The xla_flow programs' checks: CHECK counts a failed expectation and goes on, CHECK_RESULT
// does the same for a check on computed results (device data against a fresh record or the
// expected values), OK stops the program when a library call the flow needs fails. The exit
// status says which kind failed, so that tests/faults/run.sh classifies a run by it alone:
//   0 every check held; 1 a check on what the library reported failed, or the flow stopped on a
//   failed call; 3 (kWrongResult) a check on results failed, whatever else happened after it.
// XLA_FLOW_SELF_TEST=wrong-result makes the first CHECK_RESULT fail as a wrong result would
// (the fault matrix's self-test of its classifier).
#ifndef XLA_FLOW_CHECK_H
#define XLA_FLOW_CHECK_H

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "rocm_cmdbuf.hpp"

namespace {

int failures = 0;
int result_failures = 0;
constexpr int kWrongResult = 3;

// The exit status for the checks failed so far (a stop after a wrong result is still wrong).
inline int FailureStatus() { return result_failures != 0 ? kWrongResult : 1; }

// Whether the self-test asks this result check to fail (the first one only).
inline bool SelfTestWrongResult() {
  static bool pending = [] {
    const char* v = std::getenv("XLA_FLOW_SELF_TEST");
    return v != nullptr && std::strcmp(v, "wrong-result") == 0;
  }();
  bool fire = pending;
  pending = false;
  return fire;
}

#define CHECK(cond, ...)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      ++failures;                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fputc('\n', stderr);                                                   \
    }                                                                             \
  } while (0)

#define CHECK_RESULT(cond, ...)                                                           \
  do {                                                                                    \
    if (!(cond) || SelfTestWrongResult()) {                                               \
      ++failures;                                                                         \
      ++result_failures;                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK_RESULT(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                  \
      std::fputc('\n', stderr);                                                           \
    }                                                                                     \
  } while (0)

// A library call the flow needs: stop on failure.
#define OK(expr)                                                                           \
  do {                                                                                     \
    rcb::Status s_ = (expr);                                                               \
    if (!s_.ok()) {                                                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(FailureStatus());                                                          \
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
    std::printf("%s: %d check(s) failed, %d of them on results\n", program, failures, result_failures);
    return FailureStatus();
  }
  std::printf("%s: all checks passed\n", program);
  return 0;
}

}  // namespace

#endif  // XLA_FLOW_CHECK_H
