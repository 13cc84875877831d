// The hostile-plugin fixture set through the loader (issue 22, defects 4 and 5), each load
// in a child process (plugin/child_probe.h) so a fault is a test failure, not the end of
// this binary:
//  - tables a file check must refuse (no table, a future ABI, a struct claiming another
//    version, a function or a one-byte object under the table's name), each with a
//    constructor that leaves a marker file: refused with the exact message, and the marker
//    never appears, so none of their code ran; the same library dlopen'ed directly does
//    leave the marker (the control that shows the check can fail);
//  - files that are no shared library of this machine;
//  - well-formed tables whose constructors fault or exit: `partrain plugins` lists them as
//    refused with the signal or exit code and keeps going, and the worker's find_probed
//    refuses them;
//  - plugin names with a path in them.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "plugin/child_probe.h"
#include "plugin/data_loader.h"
#include "plugin/list.h"
#include "test_util.h"

// Whether this build runs under AddressSanitizer: GCC says so with __SANITIZE_ADDRESS__,
// clang 14 (the sanitizer tree's) only through __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PARTRAIN_HAS_ASAN 1
#endif
#endif
#ifndef PARTRAIN_HAS_ASAN
#define PARTRAIN_HAS_ASAN 0
#endif

namespace partrain::plugin {
namespace {

namespace fs = std::filesystem;

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    marker_ = dir_ + "/ran";
    ::setenv("PARTRAIN_FIXTURE_MARKER", marker_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("PARTRAIN_FIXTURE_MARKER");
  }
  std::string install(const std::string& fixture, const std::string& file) {
    const std::string to = dir_ + "/" + file;
    fs::copy_file(std::string(PARTRAIN_FIXTURE_DIR) + "/" + fixture + ".so", to);
    EXPECT_EQ(::chmod(to.c_str(), 0755), 0);
    return to;
  }
  // DataPlugin::open(path) in a child: "" when it loaded, else the refusal.
  static std::string open_in_child(const std::string& path) {
    Result<std::string> r = run_probe_in_child(path, [&path] {
      Result<std::unique_ptr<DataPlugin>> p = DataPlugin::open(path);
      return p ? std::string() : p.status().message();
    });
    return r ? *r : "probe: " + r.status().message();
  }
  bool ran() const { return fs::exists(marker_); }

  const partrain::testing::ScratchDir scratch_{"partrain_hostile"};
  const std::string dir_ = scratch_.path().string();
  std::string marker_;
};

TEST_F(Hostile, FileChecksRefuseBeforeAnyOfTheLibrarysCodeRuns) {
  const std::string how = "; this partrain loads versions 1 to 2; rebuild the plugin against this partrain's SDK headers";
  const std::string missing = ": refused: missing symbol partrain_strategy_v2; export it with PARTRAIN_STRATEGY_PLUGIN "
                              "from <partrain/data_sdk.h>";
  const std::pair<std::string, std::string> cases[] = {
      {"marker_nosym", missing},
      {"marker_func", missing},
      {"marker_tiny", missing},
      {"marker_v7", ": refused: unsupported ABI version 7 (exports partrain_strategy_v7)" + how},
      {"marker_badabi", ": refused: unsupported ABI version 3 (the partrain_strategy_v2 struct says so)" + how},
  };
  for (const auto& [fixture, message] : cases) {
    const std::string path = install(fixture, fixture + ".so");
    EXPECT_EQ(open_in_child(path), path + message) << fixture;
    EXPECT_FALSE(ran()) << fixture << ": its constructor ran before the refusal";
    fs::remove(marker_);
  }
  // The control: the same library opened by dlopen runs its constructor.
  const std::string path = dir_ + "/marker_v7.so";
  Result<std::string> r = run_probe_in_child(path, [&path] {
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    return std::string(h != nullptr ? "" : ::dlerror());
  });
  ASSERT_TRUE(r.is_ok() && r->empty()) << (r ? *r : r.status().message());
  EXPECT_TRUE(ran());
}

TEST_F(Hostile, FilesThatAreNoLibraryOfThisMachineAreRefused) {
  const std::string text = dir_ + "/text.so";
  std::ofstream(text) << "#!/bin/sh\necho not a library\n";
  EXPECT_EQ(open_in_child(text), text + ": refused: it is not an ELF shared library; rebuild it as a MODULE library "
                                        "for this machine");
  // good.so with e_machine (bytes 18-19) set to another machine's: x86-64 (62) <-> aarch64 (183).
  const std::string foreign = install("good", "foreign.so");
  {
    std::fstream f(foreign, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(18);
    const int mine = f.get();
    f.seekp(18);
    f.put(static_cast<char>(mine == 62 ? 183 : 62));
    f.put('\0');
  }
  EXPECT_NE(open_in_child(foreign).find(": refused: it is built for another machine"), std::string::npos)
      << open_in_child(foreign);
  // good.so cut inside its program headers.
  const std::string cut = install("good", "cut.so");
  fs::resize_file(cut, 100);
  EXPECT_EQ(open_in_child(cut), cut + ": refused: not a valid shared library (its program headers lies outside the "
                                      "file); rebuild it as a MODULE library");
  const std::string empty = dir_ + "/empty.so";
  std::ofstream(empty).flush();
  EXPECT_EQ(open_in_child(empty), empty + ": refused: it is not an ELF shared library; rebuild it as a MODULE library "
                                          "for this machine");
}

TEST_F(Hostile, ConstructorsThatFaultOrExitAreListedAsRefused) {
  install("good", "good.so");
  const std::string segv = install("ctor_segv", "ctor_segv.so");
  const std::string quit = install("ctor_exit", "ctor_exit.so");
  Result<std::vector<ListEntry>> list = list_plugins(dir_);
  ASSERT_TRUE(list.is_ok()) << list.status().message();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].path, quit);
  EXPECT_EQ((*list)[0].status.message(),
            quit + ": refused: loading it ended the process (exit code 3) before partrain could call it (its "
                   "constructors exit); fix the plugin or remove it");
#if defined(__SANITIZE_ADDRESS__) || PARTRAIN_HAS_ASAN  // ASan's SEGV handler reports, then aborts or exits
  EXPECT_EQ((*list)[1].status.message().rfind(segv + ": refused: loading it ", 0), 0u) << (*list)[1].status.message();
#else
  EXPECT_EQ((*list)[1].status.message(),
            segv + ": refused: loading it killed the process with signal 11 (SIGSEGV) before partrain could call it "
                   "(its constructors fault); fix the plugin or remove it");
#endif
  EXPECT_TRUE((*list)[2].status.is_ok()) << (*list)[2].status.message();
  EXPECT_EQ((*list)[2].info.name, "good");
  EXPECT_EQ((*list)[2].info.version, "2.3.4");
  // The worker's way in: refused (invalid), and this process never loaded it.
  Result<std::unique_ptr<DataPlugin>> p = find_probed<DataPlugin>(dir_, "ctor_segv");
  ASSERT_FALSE(p.is_ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("before partrain could call it"), std::string::npos) << p.status().message();
  Result<std::unique_ptr<DataPlugin>> good = find_probed<DataPlugin>(dir_, "good");
  EXPECT_TRUE(good.is_ok()) << good.status().message();
}

TEST_F(Hostile, ConstructorThatHangsIsRefusedAfterTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::string> r = run_probe_in_child(dir_ + "/slow.so", [] {
    std::this_thread::sleep_for(std::chrono::seconds(30));
    return std::string();
  }, std::chrono::milliseconds(300));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), dir_ + "/slow.so: refused: loading it did not finish within 0.3 s (its constructors "
                                          "hang); fix the plugin or remove it");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// Defect 5: PARTRAIN_DATA_PLUGIN=../elsewhere/evil loaded a plugin from outside plugin_dir.
TEST_F(Hostile, NamesWithAPathAreRefused) {
  fs::create_directories(dir_ + "/elsewhere");
  ASSERT_EQ(::chmod((dir_ + "/elsewhere").c_str(), 0755), 0);
  install("good", "elsewhere/evil.so");
  const std::string plugins = dir_ + "/plugins";
  fs::create_directories(plugins);
  ASSERT_EQ(::chmod(plugins.c_str(), 0755), 0);
  for (const std::string name : {"../elsewhere/evil", "/tmp/evil", "a/b", "", "zero 2", "dp\n"}) {
    Result<std::unique_ptr<DataPlugin>> p = DataPlugin::find(plugins, name);
    ASSERT_FALSE(p.is_ok()) << name;
    EXPECT_EQ(p.status().message(),
              "plugin name '" + name + "': refused: a plugin is named by its file in the site config's plugin_dir, "
              "in letters, digits, '_', '.' and '-' only (no '/'); install it there and give its name, e.g. dp or "
              "zero2") << name;
  }
  EXPECT_EQ(DataPlugin::find(plugins, "zero2").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace partrain::plugin
