// doctest's main, plus one guard: a run asked for test cases by name that matched none fails.
// ctest runs each discovered case by name, and a name CMake cannot pass through whole (a ';'
// splits it) would otherwise run nothing and pass.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

namespace {

int matched = -1; // test cases that passed the filters, from the run's statistics

struct match_counter : doctest::IReporter {
  explicit match_counter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    matched = static_cast<int>(s.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("kiln_match_counter", 1, match_counter);

} // namespace

int main(int argc, char** argv) {
  doctest::Context ctx(argc, argv);
  int rc = ctx.run();
  if (ctx.shouldExit()) return rc;
  bool by_name = false;
  for (int i = 1; i < argc; ++i)
    by_name = by_name || std::strncmp(argv[i], "--test-case=", 12) == 0 ||
              std::strncmp(argv[i], "-tc=", 4) == 0;
  if (rc == 0 && by_name && matched == 0) {
    std::fprintf(stderr, "test_main: no test case matched the --test-case filter\n");
    return 1;
  }
  return rc;
}
