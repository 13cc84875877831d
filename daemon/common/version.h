// partrain's version: the project version of the top-level CMakeLists.txt
// (`project(partrain VERSION ...)`), the one place it is written. `partrain --version`,
// `partraind --version` and the state store's record of who wrote a checkpoint read it here.
#pragma once

namespace partrain {

// E.g. "0.1.0".
const char* version();

}  // namespace partrain
