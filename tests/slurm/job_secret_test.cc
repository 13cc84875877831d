// The job's state directory and secret: made once, by exactly one of many racing tasks,
// private to the user, and refused when someone else owns or can read it.
#include "job_secret.h"

#include <set>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "test_util.h"

namespace partrain::spank {
namespace {

namespace fs = std::filesystem;
using partrain::testing::slurp;

class JobSecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("partrain-secret-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    dir_ = (root_ / "42").string();
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path root_;
  std::string dir_;
};

TEST_F(JobSecretTest, MadeOncePrivateAndStable) {
  ASSERT_TRUE(ensure_state_dir(root_.string(), dir_, ::getuid()).is_ok());
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  Result<std::string> first = ensure_job_secret(dir_, ::getuid());
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  EXPECT_EQ(*first, dir_ + "/job.secret");
  ASSERT_EQ(::stat(first->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string secret = slurp(*first);
  ASSERT_EQ(secret.size(), 65u);
  EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), 64u);

  Result<std::string> again = ensure_job_secret(dir_, ::getuid());  // e.g. a requeued run
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(slurp(*again), secret);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1)
      << "temporary files must not be left behind";
}

TEST_F(JobSecretTest, RacingTasksAllSeeTheSameCompleteSecret) {
  ASSERT_TRUE(ensure_state_dir(root_.string(), dir_, ::getuid()).is_ok());
  constexpr int kTasks = 16;
  std::vector<std::string> seen(kTasks);
  std::vector<std::thread> tasks;
  for (int i = 0; i < kTasks; ++i) {
    tasks.emplace_back([&, i] {
      Result<std::string> p = ensure_job_secret(dir_, ::getuid());
      seen[i] = p.is_ok() ? slurp(*p) : "error: " + p.status().message();
    });
  }
  for (std::thread& t : tasks) t.join();
  std::set<std::string> distinct(seen.begin(), seen.end());
  ASSERT_EQ(distinct.size(), 1u) << *distinct.begin();
  EXPECT_EQ(distinct.begin()->size(), 65u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(JobSecretTest, RefusesAFileOthersCanRead) {
  ASSERT_TRUE(ensure_state_dir(root_.string(), dir_, ::getuid()).is_ok());
  ASSERT_TRUE(ensure_job_secret(dir_, ::getuid()).is_ok());
  fs::permissions(dir_ + "/job.secret", fs::perms::group_read, fs::perm_options::add);
  Result<std::string> p = ensure_job_secret(dir_, ::getuid());
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("chmod go-rwx"), std::string::npos);
}

TEST_F(JobSecretTest, RefusesAnotherUsersDirectoryAndFile) {
  ASSERT_TRUE(ensure_state_dir(root_.string(), dir_, ::getuid()).is_ok());
  Status s = ensure_state_dir(root_.string(), dir_, ::getuid() + 1);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("not to the job's user"), std::string::npos) << s.message();
  ASSERT_TRUE(ensure_job_secret(dir_, ::getuid()).is_ok());
  EXPECT_FALSE(ensure_job_secret(dir_, ::getuid() + 1).is_ok());
}

TEST_F(JobSecretTest, RefusesASymlinkInsteadOfTheSecret) {
  ASSERT_TRUE(ensure_state_dir(root_.string(), dir_, ::getuid()).is_ok());
  fs::create_symlink("/etc/hostname", dir_ + "/job.secret");
  Result<std::string> p = ensure_job_secret(dir_, ::getuid());
  ASSERT_FALSE(p.is_ok());
  EXPECT_NE(p.status().message().find("not a regular file"), std::string::npos);
}

TEST_F(JobSecretTest, MissingStateRootNamesTheFix) {
  Status s = ensure_state_dir((root_ / "absent").string(), (root_ / "absent/1").string(),
                              ::getuid());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("state_root"), std::string::npos);
  EXPECT_NE(s.message().find("1777"), std::string::npos);
}

// The job epilog's removal: the secret goes, the directory stays, a second node's call finds
// nothing to do, and neither a symlink nor another user's file is ever removed.
TEST_F(JobSecretTest, RemovedAtJobEndOnceAndOnlyTheUsersOwnFile) {
  EXPECT_EQ(job_state_dir("/shared/state", 4242), "/shared/state/slurm-4242");
  ASSERT_TRUE(ensure_state_dir(root_.string(), dir_, ::getuid()).is_ok());
  ASSERT_TRUE(ensure_job_secret(dir_, ::getuid()).is_ok());
  ASSERT_TRUE(remove_job_secret(dir_, ::getuid()).is_ok());
  EXPECT_FALSE(fs::exists(dir_ + "/job.secret"));
  EXPECT_TRUE(fs::is_directory(dir_));
  EXPECT_TRUE(remove_job_secret(dir_, ::getuid()).is_ok()) << "the second node's epilog";
  EXPECT_TRUE(remove_job_secret((root_ / "no-such-job").string(), ::getuid()).is_ok());

  const std::string target = (root_ / "precious").string();
  { std::ofstream(target) << "keep me"; }
  fs::create_symlink(target, dir_ + "/job.secret");
  Status s = remove_job_secret(dir_, ::getuid());
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("left in place"), std::string::npos) << s.message();
  EXPECT_TRUE(fs::exists(target));
  EXPECT_TRUE(fs::is_symlink(dir_ + "/job.secret"));
  fs::remove(dir_ + "/job.secret");

  ASSERT_TRUE(ensure_job_secret(dir_, ::getuid()).is_ok());
  EXPECT_FALSE(remove_job_secret(dir_, ::getuid() + 1).is_ok()) << "another user's job";
  EXPECT_TRUE(fs::exists(dir_ + "/job.secret"));

  // A state directory replaced by a symlink is not followed either.
  fs::create_directories(root_ / "elsewhere");
  ASSERT_TRUE(ensure_job_secret((root_ / "elsewhere").string(), ::getuid()).is_ok());
  fs::create_directory_symlink(root_ / "elsewhere", root_ / "linked");
  EXPECT_FALSE(remove_job_secret((root_ / "linked").string(), ::getuid()).is_ok());
  EXPECT_TRUE(fs::exists(root_ / "elsewhere" / "job.secret"));
}

}  // namespace
}  // namespace partrain::spank
