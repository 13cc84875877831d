// The pipeline schedule checker (pipeline/check.h) on schedules made from any bytes: the
// shape from the first three bytes (pp 1-8, m 1-16, v 1-4), then five bytes per action
// (rank, kind, micro-batch, chunk, peer), kinds and indices partly out of range on purpose.
// The checker must refuse with a message or accept; never crash, loop or overflow.
#include <cstdint>
#include <string>

#include "pipeline/check.h"
#include "pipeline/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace partrain::pipeline;
  if (size < 3) return 0;
  Schedule s;
  s.name = "fuzz";
  s.shape = Shape{1 + data[0] % 8, 1 + data[1] % 16, 1 + data[2] % 4};
  s.ranks.resize(static_cast<size_t>(s.shape.pp));
  for (size_t i = 3; i + 5 <= size && i < 3 + 5 * 4096; i += 5) {
    const int rank = data[i] % s.shape.pp;
    Action a;
    a.kind = static_cast<Kind>(data[i + 1] % 10);  // 0 and 9 are unknown kinds
    a.mb = static_cast<int>(data[i + 2]) - 8;      // some negative, some past m
    a.chunk = static_cast<int>(data[i + 3] % 6) - 1;
    a.peer = static_cast<int>(data[i + 4] % 12) - 2;
    s.ranks[static_cast<size_t>(rank)].push_back(a);
  }
  (void)check(s);
  return 0;
}
