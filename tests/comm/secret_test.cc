// The job secret's sources: a mode-0600 file (anything looser is refused with the fix) or
// PARTRAIN_JOB_SECRET.
#include "comm/rendezvous/secret.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "test_util.h"

namespace partrain::comm {
namespace {

class SecretFile : public ::testing::Test {
 protected:
  void write(const std::string& content, mode_t mode) {
    std::ofstream(path_) << content;
    ASSERT_EQ(::chmod(path_.c_str(), mode), 0);
  }
  const partrain::testing::ScratchDir scratch_{"partrain-secret"};
  const std::string path_ = (scratch_.path() / "job.secret").string();
};

TEST_F(SecretFile, Mode0600IsReadWithoutTrailingNewline) {
  write("0123456789abcdef0123\n", 0600);
  auto s = read_secret_file(path_);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(*s, "0123456789abcdef0123");
}

TEST_F(SecretFile, Mode0644IsRefusedNamingFileAndFix) {
  write("0123456789abcdef0123\n", 0644);
  auto s = read_secret_file(path_);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find(path_), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("chmod 600 " + path_), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("0644"), std::string::npos) << s.status().message();
}

TEST_F(SecretFile, GroupReadableIsRefused) {
  write("0123456789abcdef0123", 0640);
  EXPECT_FALSE(read_secret_file(path_).is_ok());
}

TEST_F(SecretFile, TooShortIsRefused) {
  write("short", 0600);
  auto s = read_secret_file(path_);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("fewer than"), std::string::npos) << s.status().message();
}

TEST_F(SecretFile, MissingFileIsNotFound) {
  auto s = read_secret_file(path_);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

TEST_F(SecretFile, GeneratedSecretIsWrittenWithMode0600AndReadsBack) {
  auto secret = generate_secret();
  ASSERT_TRUE(secret.is_ok());
  EXPECT_EQ(secret->size(), 64u);
  ASSERT_TRUE(write_secret_file(path_, *secret).is_ok());
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto back = read_secret_file(path_);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(*back, *secret);
  // Never overwrites an existing file.
  EXPECT_FALSE(write_secret_file(path_, *secret).is_ok());
  // Two generated secrets differ.
  EXPECT_NE(*generate_secret(), *secret);
}

TEST(SecretEnv, FromEnvironmentOrClearError) {
  ::setenv(kJobSecretEnv, "environment-secret-123456", 1);
  auto s = load_job_secret("");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(*s, "environment-secret-123456");
  ::unsetenv(kJobSecretEnv);
  auto missing = load_job_secret("");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find(kJobSecretEnv), std::string::npos);
}

}  // namespace
}  // namespace partrain::comm
