// The source tree's shipped hardware profiles (etc/hardware), which the planner's tests load
// by name with load_hardware(NAME, kHardwareDir).
#pragma once

#include <string>

#ifndef PARTRAIN_SOURCE_DIR
#error "PARTRAIN_SOURCE_DIR must be defined by the build"
#endif

namespace partrain::planner {

inline const std::string kHardwareDir = std::string(PARTRAIN_SOURCE_DIR) + "/etc/hardware";

}  // namespace partrain::planner
