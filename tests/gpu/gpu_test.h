// The harness every gpu test is written against. With GoogleTest (the normal build) it is
// GoogleTest. In a GPU-only build on a machine without GoogleTest (scripts/gpu-check.sh on a
// bare CUDA box) it is a small stand-in with the same spelling for the subset used here:
// TEST, EXPECT_TRUE/ASSERT_TRUE, EXPECT_LE/ASSERT_LE, ASSERT_EQ, EXPECT_EQ, GTEST_SKIP, each
// taking `<< message`. Its main() runs every test and exits 0 (all passed), 1 (a failure)
// or 77 (everything skipped), which CTest reads through SKIP_RETURN_CODE 77.
//
// PARTRAIN_REQUIRE_GPU() opens every test: with no usable device (cudaGetDeviceCount fails,
// e.g. cudaErrorInsufficientDriver on a machine without a driver) the test is skipped.
#pragma once

#include <cuda_runtime_api.h>

#if defined(PARTRAIN_GPU_TESTS_GTEST)
#include <gtest/gtest.h>
#else
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace partrain::minitest {

struct Registry {
  struct Entry {
    std::string name;
    void (*fn)();
  };
  std::vector<Entry> tests;
  int failures_in_test = 0;
  bool skipped = false;
  static Registry& get() {
    static Registry r;
    return r;
  }
};

struct Registrar {
  Registrar(const char* name, void (*fn)()) { Registry::get().tests.push_back({name, fn}); }
};

struct Message {
  std::ostringstream s;
  template <typename T>
  Message& operator<<(const T& v) {
    s << v;
    return *this;
  }
};

struct Failure {
  const char* file;
  int line;
  const char* expr;
  // Assigning the message reports it (the trick that lets `return Failure{} = Message() << x`).
  void operator=(const Message& m) const {
    std::printf("%s:%d: Failure\n  %s\n  %s\n", file, line, expr, m.s.str().c_str());
    Registry::get().failures_in_test++;
  }
};

struct Skip {
  void operator=(const Message& m) const {
    std::printf("  skipped: %s\n", m.s.str().c_str());
    Registry::get().skipped = true;
  }
};

}  // namespace partrain::minitest

#define PARTRAIN_MT_CHECK_(cond, text)                                         \
  if (cond) {                                                                  \
  } else /* NOLINT */                                                          \
    ::partrain::minitest::Failure{__FILE__, __LINE__, text} = ::partrain::minitest::Message()
#define PARTRAIN_MT_ASSERT_(cond, text)                                        \
  if (cond) {                                                                  \
  } else /* NOLINT */                                                          \
    return ::partrain::minitest::Failure{__FILE__, __LINE__, text} = ::partrain::minitest::Message()

#define TEST(suite, name)                                                              \
  static void partrain_mt_##suite##_##name();                                          \
  static ::partrain::minitest::Registrar partrain_mt_reg_##suite##_##name(             \
      #suite "." #name, &partrain_mt_##suite##_##name);                                \
  static void partrain_mt_##suite##_##name()

#define EXPECT_TRUE(c) PARTRAIN_MT_CHECK_((c), #c)
#define ASSERT_TRUE(c) PARTRAIN_MT_ASSERT_((c), #c)
#define EXPECT_FALSE(c) PARTRAIN_MT_CHECK_(!(c), "!(" #c ")")
#define ASSERT_FALSE(c) PARTRAIN_MT_ASSERT_(!(c), "!(" #c ")")
#define EXPECT_LE(a, b) PARTRAIN_MT_CHECK_((a) <= (b), #a " <= " #b) << (a) << " vs " << (b) << ": "
#define ASSERT_LE(a, b) PARTRAIN_MT_ASSERT_((a) <= (b), #a " <= " #b) << (a) << " vs " << (b) << ": "
#define EXPECT_LT(a, b) PARTRAIN_MT_CHECK_((a) < (b), #a " < " #b) << (a) << " vs " << (b) << ": "
#define EXPECT_EQ(a, b) PARTRAIN_MT_CHECK_((a) == (b), #a " == " #b) << (a) << " vs " << (b) << ": "
#define ASSERT_EQ(a, b) PARTRAIN_MT_ASSERT_((a) == (b), #a " == " #b) << (a) << " vs " << (b) << ": "
#define GTEST_SKIP() return ::partrain::minitest::Skip{} = ::partrain::minitest::Message()

#endif

namespace partrain::gputest {
// True when the CUDA runtime sees at least one device; never throws or exits.
inline bool device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}
}  // namespace partrain::gputest

#define PARTRAIN_REQUIRE_GPU()                                                     \
  if (!::partrain::gputest::device_present()) {                                    \
    GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or found none)";    \
  }
