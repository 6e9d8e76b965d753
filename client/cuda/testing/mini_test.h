// A minimal test harness for batchd_cuda's tests, which must build on GPU
// machines with only the CUDA toolkit and the C++ standard library (no
// GoogleTest there). Same shape as gtest, much less of it:
//
//   MINI_TEST(Normalize, MatchesReference) {
//     MINI_EXPECT_EQ(a, b);
//     if (!HaveDevice()) MINI_SKIP("no CUDA device");
//   }
//   int main(int argc, char** argv) { return mini_test::RunAll(argc, argv); }
//
// RunAll returns 0 when every test passed or skipped, 1 on a failure, and
// kSkipExitCode (ctest's SKIP_RETURN_CODE) when every test skipped.
// Optional argument: a substring; only tests whose name contains it run.
//
// Thread-safety: checks must run on the test's own thread.
#ifndef BATCHD_CLIENT_CUDA_TESTING_MINI_TEST_H_
#define BATCHD_CLIENT_CUDA_TESTING_MINI_TEST_H_

#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace mini_test {

inline constexpr int kSkipExitCode = 77;

struct TestCase {
  std::string name;
  std::function<void()> body;
};

inline std::vector<TestCase>& Registry() {
  static std::vector<TestCase>* tests = new std::vector<TestCase>;
  return *tests;
}

struct State {
  int failures = 0;
  bool skipped = false;
  std::string skip_reason;
};

inline State& Current() {
  static State state;
  return state;
}

struct Registrar {
  Registrar(const char* suite, const char* name, std::function<void()> body) {
    Registry().push_back({std::string(suite) + "." + name, std::move(body)});
  }
};

// Thrown by ASSERT and SKIP to leave the test body.
struct Abort {};

inline void Fail(const char* file, int line, const std::string& message) {
  ++Current().failures;
  std::fprintf(stderr, "%s:%d: Failure\n%s\n", file, line, message.c_str());
}

// Enums print as their number.
template <typename T>
auto Printable(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<long long>(value);
  } else {
    return value;
  }
}

template <typename A, typename B>
std::string Describe(const char* a_text, const char* b_text, const A& a,
                     const B& b, const char* op) {
  std::ostringstream out;
  out << "Expected: " << a_text << " " << op << " " << b_text
      << "\n  actual: " << Printable(a) << " vs " << Printable(b);
  return out.str();
}

inline int RunAll(int argc, char** argv) {
  const std::string filter = argc > 1 ? argv[1] : "";
  int failed = 0, passed = 0, skipped = 0;
  for (const TestCase& test : Registry()) {
    if (!filter.empty() && test.name.find(filter) == std::string::npos) {
      continue;
    }
    Current() = State();
    std::printf("[ RUN      ] %s\n", test.name.c_str());
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    try {
      test.body();
    } catch (const Abort&) {
    }
    const long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    if (Current().failures > 0) {
      ++failed;
      std::printf("[  FAILED  ] %s (%lld ms)\n", test.name.c_str(), ms);
    } else if (Current().skipped) {
      ++skipped;
      std::printf("[  SKIPPED ] %s: %s\n", test.name.c_str(),
                  Current().skip_reason.c_str());
    } else {
      ++passed;
      std::printf("[       OK ] %s (%lld ms)\n", test.name.c_str(), ms);
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (failed > 0) return 1;
  if (passed == 0 && skipped > 0) return kSkipExitCode;
  return 0;
}

}  // namespace mini_test

#define MINI_TEST(suite, name)                                            \
  static void MiniTest_##suite##_##name();                                \
  static ::mini_test::Registrar mini_registrar_##suite##_##name(          \
      #suite, #name, &MiniTest_##suite##_##name);                         \
  static void MiniTest_##suite##_##name()

#define MINI_CHECK_OP_(a, b, op, fatal)                                     \
  do {                                                                      \
    const auto& mini_a_ = (a);                                              \
    const auto& mini_b_ = (b);                                              \
    if (!(mini_a_ op mini_b_)) {                                            \
      ::mini_test::Fail(__FILE__, __LINE__,                                 \
                        ::mini_test::Describe(#a, #b, mini_a_, mini_b_, #op)); \
      if (fatal) throw ::mini_test::Abort();                                \
    }                                                                       \
  } while (false)

#define MINI_EXPECT_EQ(a, b) MINI_CHECK_OP_(a, b, ==, false)
#define MINI_EXPECT_NE(a, b) MINI_CHECK_OP_(a, b, !=, false)
#define MINI_EXPECT_LE(a, b) MINI_CHECK_OP_(a, b, <=, false)
#define MINI_EXPECT_LT(a, b) MINI_CHECK_OP_(a, b, <, false)
#define MINI_EXPECT_GT(a, b) MINI_CHECK_OP_(a, b, >, false)
#define MINI_ASSERT_EQ(a, b) MINI_CHECK_OP_(a, b, ==, true)
#define MINI_ASSERT_LE(a, b) MINI_CHECK_OP_(a, b, <=, true)
#define MINI_EXPECT_TRUE(c) MINI_CHECK_OP_(static_cast<bool>(c), true, ==, false)
#define MINI_ASSERT_TRUE(c) MINI_CHECK_OP_(static_cast<bool>(c), true, ==, true)

// Checks that a batchd::cuda::Status is OK, printing it otherwise.
#define MINI_ASSERT_OK(expr)                                          \
  do {                                                                \
    const ::batchd::cuda::Status mini_status_ = (expr);               \
    if (!mini_status_.ok()) {                                         \
      ::mini_test::Fail(__FILE__, __LINE__,                           \
                        std::string(#expr) + " returned " +           \
                            mini_status_.ToString());                 \
      throw ::mini_test::Abort();                                     \
    }                                                                 \
  } while (false)

#define MINI_SKIP(reason)                          \
  do {                                             \
    ::mini_test::Current().skipped = true;         \
    ::mini_test::Current().skip_reason = (reason); \
    throw ::mini_test::Abort();                    \
  } while (false)

#endif  // BATCHD_CLIENT_CUDA_TESTING_MINI_TEST_H_
