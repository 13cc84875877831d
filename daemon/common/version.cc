#include "common/version.h"

namespace partrain {

// PARTRAIN_VERSION is defined for this file alone (daemon/common/CMakeLists.txt), so a new
// version recompiles one object.
const char* version() { return PARTRAIN_VERSION; }

}  // namespace partrain
