// Where a program finds the files installed with it (common/install_dir.h): its prefix is its
// folder less the install folder it lives in, for the installed layout (bin/ and
// libexec/partrain/), for a moved installation (dpkg --root) and for the build tree, which
// mirrors the layout. The expected prefixes are written out here from GNUInstallDirs' folders.
#include "common/install_dir.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace partrain {
namespace {

namespace fs = std::filesystem;
const fs::path kBin = PARTRAIN_TEST_BINDIR;          // e.g. bin
const fs::path kLibexec = PARTRAIN_TEST_LIBEXECDIR;  // e.g. libexec

TEST(InstallDir, ProgramsOfOneInstallationShareTheirPrefix) {
  EXPECT_EQ(install_prefix_of(fs::path("/usr") / kBin / "partrain"), "/usr");
  EXPECT_EQ(install_prefix_of(fs::path("/usr") / kLibexec / "partrain/partrain-worker"), "/usr");
  // dpkg --root, DESTDIR: the same layout under another folder.
  EXPECT_EQ(install_prefix_of(fs::path("/tmp/root/usr") / kBin / "partraind"), "/tmp/root/usr");
  EXPECT_EQ(install_prefix_of(fs::path("/tmp/root/usr") / kLibexec / "partrain/partrain-worker"), "/tmp/root/usr");
  EXPECT_EQ(install_prefix_of(fs::path("/opt/p/./") / kBin / "../" / kBin / "partrain"), "/opt/p");
}

TEST(InstallDir, AProgramOutsideTheLayoutGetsItsFoldersParent) {
  EXPECT_EQ(install_prefix_of("/work/build/tests/common/install_dir_test"), "/work/build/tests");
  EXPECT_EQ(install_prefix_of("/work/partrain/other/tool"), "/work/partrain");  // not libexec/partrain
}

// The build tree's partrain is in bin/: its prefix is the build folder, where its worker and
// (with CUDA) its GPU module are, at the installed layout's relative paths.
TEST(InstallDir, TheBuildTreeMirrorsTheLayout) {
  const fs::path cli = PARTRAIN_TEST_CLI;
  const fs::path build = PARTRAIN_TEST_BUILD_DIR;
  EXPECT_EQ(install_prefix_of(cli), build);
  EXPECT_TRUE(fs::exists(cli.parent_path() / "partrain-worker")) << cli.parent_path();
#ifdef PARTRAIN_TEST_CUDA_MODULE
  EXPECT_EQ(install_prefix_of(cli) / PARTRAIN_TEST_CUDA_MODULE, fs::path(PARTRAIN_TEST_CUDA_MODULE_FILE));
#endif
}

}  // namespace
}  // namespace partrain
