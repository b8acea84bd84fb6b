// The xla_flow programs' checks: CHECK counts a failed expectation and goes on, CHECK_RESULT
// does the same for a check on computed results (device data against a fresh record or the
// expected values), CHECK_CONTRACT for a safety property that must hold whatever fails (a
// stream handed out twice, a launch of stale nodes allowed, a slot given for another
// iteration), OK stops the program when a library call the flow needs fails. The exit status
// says which kind failed, so that tests/faults/run.sh classifies a run by it alone:
//   0 every check held; 1 a check on what the library reported failed, or the flow stopped on a
//   failed call; 3 (kWrongResult) a check on results failed; 4 (kContractBreach) a safety
//   property failed and no result check did; either whatever else happened after it.
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
int contract_failures = 0;
constexpr int kWrongResult = 3;
constexpr int kContractBreach = 4;

// The exit status for the checks failed so far (a stop after a wrong result or a breach is
// still one).
inline int FailureStatus() {
  if (result_failures != 0) return kWrongResult;
  return contract_failures != 0 ? kContractBreach : 1;
}

// One failed check, reported under its macro's `name` and counted in `failures` and, for a
// result or contract check, in `kind` (null for a plain check).
#define XLA_FLOW_CHECK_(kind, name, cond, ...)                                          \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      ++failures;                                                                       \
      if (int* kind_ = (kind)) ++*kind_;                                                \
      std::fprintf(stderr, "%s:%d: " name "(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                \
      std::fputc('\n', stderr);                                                         \
    }                                                                                   \
  } while (0)

#define CHECK(cond, ...) XLA_FLOW_CHECK_(nullptr, "CHECK", cond, __VA_ARGS__)
#define CHECK_RESULT(cond, ...) XLA_FLOW_CHECK_(&result_failures, "CHECK_RESULT", cond, __VA_ARGS__)
#define CHECK_CONTRACT(cond, ...) XLA_FLOW_CHECK_(&contract_failures, "CHECK_CONTRACT", cond, __VA_ARGS__)

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
