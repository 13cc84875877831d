// main() of the GoogleTest stand-in (gpu_test.h), linked only where GoogleTest is absent.
#include <cstdio>

#include "gpu_test.h"

int main() {
  auto& reg = ::partrain::minitest::Registry::get();
  int failed = 0, skipped = 0;
  for (const auto& t : reg.tests) {
    reg.failures_in_test = 0;
    reg.skipped = false;
    std::printf("[ RUN      ] %s\n", t.name.c_str());
    std::fflush(stdout);
    t.fn();
    const char* verdict = reg.failures_in_test > 0 ? "[  FAILED  ]" : reg.skipped ? "[  SKIPPED ]" : "[       OK ]";
    std::printf("%s %s\n", verdict, t.name.c_str());
    std::fflush(stdout);
    failed += reg.failures_in_test > 0;
    skipped += reg.skipped && reg.failures_in_test == 0;
  }
  std::printf("%zu tests: %d failed, %d skipped\n", reg.tests.size(), failed, skipped);
  if (failed > 0) return 1;
  return skipped == static_cast<int>(reg.tests.size()) ? 77 : 0;
}
