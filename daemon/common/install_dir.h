// Where a program finds the files installed with it: relative to the running program, never
// through a compiled-in absolute path. So an installation moved as a whole (dpkg --root,
// DESTDIR, another prefix) finds its own files, and an installed program never falls back
// to the build tree it was built in. The build tree mirrors the installed layout for what
// is looked up this way (bin/ and <libdir>/partrain/, see daemon/gpu/CMakeLists.txt), so a
// program run from build/bin finds the build's files by the same rule.
//
// install_prefix(): the running program's folder less the install folder it lives in
// (CMAKE_INSTALL_BINDIR or CMAKE_INSTALL_LIBEXECDIR/partrain, compiled in as relative paths);
// a program in neither (a test binary) gets its folder's parent.
//
// Worked example (prefix /usr, libdir lib/x86_64-linux-gnu): /root/usr/bin/partrain and
// /root/usr/libexec/partrain/partrain-worker both get the prefix /root/usr, and
// installed_path("lib/x86_64-linux-gnu/partrain/libpartrain_cuda.so") is
// /root/usr/lib/x86_64-linux-gnu/partrain/libpartrain_cuda.so; build/bin/partraind gets build/.
#pragma once

#include <filesystem>
#include <string_view>

namespace partrain {

// The prefix the running program was installed under (see above).
std::filesystem::path install_prefix();

// install_prefix() / relative.
std::filesystem::path installed_path(std::string_view relative);

// The prefix of a program at `program` (a path to its file), for tests: install_prefix() is
// install_prefix_of(/proc/self/exe).
std::filesystem::path install_prefix_of(const std::filesystem::path& program);

}  // namespace partrain
