// Linked into each of the series' xla_cc_tests by run.sh (it is not part of the series): prints
// `SKIPPED <program>: <suite>.<test> (<message>)` for every test that skips (GTEST_SKIP, e.g.
// without a ROCm platform on the GPU machine), as the other programs print theirs, so that
// ci/skips.sh compares them with tests/expected-skips/ like every other skipped check.
#include <errno.h>  // program_invocation_short_name

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace {

class SkipLines : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const ::testing::TestResult& result = *info.result();
    if (!result.Skipped()) return;
    std::string why = "skipped";
    for (int i = 0; i < result.total_part_count(); ++i) {
      const ::testing::TestPartResult& part = result.GetTestPartResult(i);
      if (part.skipped() && part.message()[0] != '\0') why = part.message();
    }
    std::printf("SKIPPED %s: %s.%s (%s)\n", program_invocation_short_name, info.test_suite_name(),
                info.name(), why.c_str());
    std::fflush(stdout);
  }
};

// Before main: gtest_main's RUN_ALL_TESTS then reports to it.
const bool registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SkipLines);
  return true;
}();

}  // namespace
