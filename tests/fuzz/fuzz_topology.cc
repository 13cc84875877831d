// Slurm topology.conf (tree form) as `partrain layout --topology` parses it
// (layout/topology.h), and the leaf lookup of every node it names.
#include <cstdint>
#include <string_view>

#include "layout/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  partrain::Result<partrain::SwitchTree> t = partrain::SwitchTree::parse(text, "topology.conf");
  if (t) (void)t->leaf_of("n1");
  return 0;
}
