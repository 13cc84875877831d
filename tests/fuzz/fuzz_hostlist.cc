// Slurm host lists and task counts (layout/hostlist.h) on any bytes: bounded in names and
// bytes, a refusal is a Status.
#include <cstdint>
#include <string_view>

#include "layout/hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)partrain::expand_hostlist(text, "--nodelist");
  (void)partrain::expand_task_counts(text, "--tasks-per-node");
  return 0;
}
