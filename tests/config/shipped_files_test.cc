// The files partrain ships in etc/ load as they are, say what their READMEs promise, and
// the site-config example shows every key the code accepts.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "config/job_config.h"
#include "config/site_config.h"
#include "test_util.h"

#ifndef PARTRAIN_SOURCE_DIR
#error "PARTRAIN_SOURCE_DIR must be defined by the build"
#endif

namespace partrain::config {
namespace {

using testing::slurp;

const std::filesystem::path kEtc = std::filesystem::path(PARTRAIN_SOURCE_DIR) / "etc";

TEST(ShippedFiles, SiteConfigExampleLoadsAndShowsEveryKey) {
  auto site = load_site_file((kEtc / "partrain.toml").string());
  ASSERT_TRUE(site.is_ok()) << site.status().message();
  EXPECT_EQ(site->log_level, log::Level::kInfo);
  // Every key appears, set or commented out, as "key =" under its "[table]".
  const std::string text = slurp(kEtc / "partrain.toml");
  for (const auto& dotted : known_site_keys()) {
    const std::string table = dotted.substr(0, dotted.find('.'));
    const std::string key = dotted.substr(dotted.find('.') + 1);
    const size_t header = text.find("[" + table + "]");
    ASSERT_NE(header, std::string::npos) << "no [" << table << "] in etc/partrain.toml";
    std::regex line("(^|\\n)#? ?" + key + " =");
    std::smatch m;
    const std::string after = text.substr(header);
    ASSERT_TRUE(std::regex_search(after, m, line)) << dotted << " missing from etc/partrain.toml";
    const size_t next = after.find("\n[", 1);
    EXPECT_LT(static_cast<size_t>(m.position(0)), next) << dotted << " is not under its table";
  }
}

TEST(ShippedFiles, SiteConfigExampleFullyUncommentedStillLoads) {
  // Uncommenting any line of the example must give a valid config: do them all at once.
  std::istringstream in(slurp(kEtc / "partrain.toml"));
  std::string out;
  const std::regex commented("^# ?([a-z_]+ = .*)$");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    out += (std::regex_match(line, m, commented) ? m[1].str() : line) + "\n";
  }
  auto site = parse_site(out, (kEtc / "partrain.toml").string());
  ASSERT_TRUE(site.is_ok()) << site.status().message() << "\n" << out;
}

TEST(ShippedFiles, TinyExampleIsTheDemoJob) {
  auto job = load_job((kEtc / "examples/tiny.toml").string());
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->model.arch, engine::Arch::kGpt2);
  EXPECT_EQ(job->model.vocab_size, 256);
  EXPECT_EQ(job->model.seq_len, 64);
  EXPECT_EQ(job->model.layers, 2);
  EXPECT_EQ(job->model.hidden, 128);
  EXPECT_EQ(job->model.heads, 4);
  EXPECT_EQ(job->model.moe_experts, 0);
  EXPECT_EQ(job->training.global_batch, 16);
  EXPECT_EQ(job->training.micro_batch, 8);
  EXPECT_FLOAT_EQ(job->training.lr, 1e-3f);
  EXPECT_EQ(job->training.warmup_steps, 10);
  EXPECT_EQ(job->training.steps, 100);
  ASSERT_EQ(job->data.train_files.size(), 1u);
  EXPECT_EQ(job->data.train_files[0],
            (kEtc / "examples/data/licenses_train.bin").lexically_normal().string());
  EXPECT_EQ(*grad_accum_steps(*job, 1), 2);
  EXPECT_EQ(*grad_accum_steps(*job, 2), 1);
}

TEST(ShippedFiles, LlamaExampleUsesGroupedQueryAttention) {
  auto job = load_job((kEtc / "examples/llama-tiny.toml").string());
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->model.arch, engine::Arch::kLlama);
  EXPECT_EQ(job->model.layers, 2);
  EXPECT_EQ(job->model.hidden, 128);
  EXPECT_EQ(job->model.heads, 4);
  EXPECT_EQ(job->model.kv_heads, 2);
  EXPECT_FALSE(job->model.tie_embeddings);
  EXPECT_EQ(job->data.train_files[0],
            (kEtc / "examples/data/licenses_train.bin").lexically_normal().string());
}

TEST(ShippedFiles, MoeExampleHasFourExpertsTopTwo) {
  auto job = load_job((kEtc / "examples/moe-tiny.toml").string());
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->model.arch, engine::Arch::kGpt2);
  EXPECT_EQ(job->model.moe_experts, 4);
  EXPECT_EQ(job->model.moe_top_k, 2);
}

// The long-context example asks for cp4 and cuts into its 8 chunks.
TEST(ShippedFiles, LongContextExampleIsContextParallel) {
  auto job = load_job((kEtc / "examples/long-context.toml").string());
  ASSERT_TRUE(job.is_ok()) << job.status().message();
  EXPECT_EQ(job->parallelism.cp, 4);
  EXPECT_EQ(job->parallelism.cp_impl, "ring");
  EXPECT_EQ(job->model.seq_len % (2 * job->parallelism.cp), 0);
}

TEST(ShippedFiles, EveryExampleLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kEtc / "examples")) {
    if (entry.path().extension() != ".toml") continue;
    ++count;
    auto job = load_job(entry.path().string());
    EXPECT_TRUE(job.is_ok()) << job.status().message();
    if (job.is_ok()) {
      EXPECT_TRUE(grad_accum_steps(*job, 1).is_ok()) << entry.path();
    }
  }
  EXPECT_GE(count, 3);
}

}  // namespace
}  // namespace partrain::config
