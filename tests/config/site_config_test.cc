// The site config: values, defaults, which file is read, and its errors.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "config/site_config.h"
#include "test_util.h"

namespace partrain::config {
namespace {

using testing::ScopedEnv;
using testing::ScratchDir;

TEST(SiteConfig, EveryKeyLandsInItsField) {
  ScratchDir dir;
  const std::string path = dir.write("etc/partrain.toml", R"(
[paths]
plugin_dir = "/opt/partrain/plugins"
state_root = "state"          # relative: against this file's folder

[topology]
gpus_per_node = 4
nvlink_domain = 4
file = "/etc/slurm/topology.conf"

[defaults]
spec = "zero1,sched=gpipe"

[agent]
progress_timeout = 120

[log]
level = "debug"
)");
  auto site = load_site_file(path);
  ASSERT_TRUE(site.is_ok()) << site.status().message();
  EXPECT_EQ(site->path, path);
  EXPECT_EQ(site->plugin_dir, "/opt/partrain/plugins");
  EXPECT_EQ(site->state_root, (dir.path() / "etc/state").string());
  EXPECT_EQ(site->gpus_per_node, 4);
  EXPECT_EQ(site->nvlink_domain, 4);
  EXPECT_EQ(site->topology_file, "/etc/slurm/topology.conf");
  EXPECT_EQ(site->default_spec, "zero1,sched=gpipe");
  EXPECT_EQ(site->progress_timeout, 120);
  EXPECT_EQ(site->log_level, log::Level::kDebug);
}

TEST(SiteConfig, AnEmptyFileKeepsTheBuiltInDefaults) {
  auto site = parse_site("# nothing set\n", "partrain.toml");
  ASSERT_TRUE(site.is_ok()) << site.status().message();
  EXPECT_EQ(site->plugin_dir, default_plugin_dir());
  EXPECT_FALSE(site->plugin_dir.empty());
  EXPECT_EQ(site->progress_timeout, 600);  // the watchdog: 10 minutes
  EXPECT_EQ(site->state_root, "/var/lib/partrain");
  EXPECT_EQ(site->gpus_per_node, 0);
  EXPECT_EQ(site->nvlink_domain, 0);
  EXPECT_EQ(site->topology_file, "");
  EXPECT_EQ(site->default_spec, "");
  EXPECT_EQ(site->log_level, log::Level::kInfo);
}

TEST(SiteConfig, ErrorsNameFileLineAndKey) {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"[paths]\nplugin_directory = \"/x\"\n",
       "site.toml:2: [paths] key 'plugin_directory' is unknown; did you mean 'plugin_dir'?"},
      {"[topology]\ngpus_per_node = -1\n",
       "site.toml:2: [topology] key 'gpus_per_node' must be >= 0 (got -1)"},
      {"[topology]\ngpus_per_node = 8\nnvlink_domain = 12\n",
       "site.toml:3: [topology] nvlink_domain = 12 spans part of a node of gpus_per_node = 8; "
       "a domain larger than a node must hold whole nodes"},
      {"[log]\nlevel = \"verbose\"\n",
       "site.toml:2: [log] key 'level' must be one of \"debug\", \"info\", \"warn\", \"error\" "
       "(got \"verbose\")"},
      {"[topology]\nplugin_dir = \"/x\"\n",
       "site.toml:2: [topology] key 'plugin_dir' is unknown; it belongs in [paths]"},
      {"[training]\nlr = 1\n",
       "site.toml:1: table [training] is unknown; the tables are [paths] [topology] [rendezvous] [defaults] "
       "[agent] [log]"},
  };
  for (const Case& c : cases) {
    auto site = parse_site(c.text, "site.toml");
    ASSERT_FALSE(site.is_ok()) << c.text;
    EXPECT_EQ(site.status().message(), c.message);
  }
  auto spec = parse_site("[defaults]\nspec = \"tp2,zero9\"\n", "site.toml");
  ASSERT_FALSE(spec.is_ok());
  EXPECT_EQ(spec.status().message().rfind(
                "site.toml:2: [defaults] key 'spec' is not a valid spec: 'zero9'", 0),
            0u)
      << spec.status().message();
}

TEST(SiteConfig, CommandLineBeatsEnvironmentBeatsCompiledInDefault) {
  {
    ScopedEnv env("PARTRAIN_SITE_CONFIG", std::nullopt);
    EXPECT_EQ(site_config_path(""), default_site_config_path());
    EXPECT_EQ(site_config_path("/a/cli.toml"), "/a/cli.toml");
  }
  {
    ScopedEnv env("PARTRAIN_SITE_CONFIG", "/b/env.toml");
    EXPECT_EQ(site_config_path(""), "/b/env.toml");
    EXPECT_EQ(site_config_path("/a/cli.toml"), "/a/cli.toml");
  }
  EXPECT_EQ(std::filesystem::path(default_site_config_path()).filename(), "partrain.toml");
}

TEST(SiteConfig, LoadFollowsTheLookupOrder) {
  ScratchDir dir;
  const std::string env_file = dir.write("env.toml", "[topology]\ngpus_per_node = 2\n");
  const std::string cli_file = dir.write("cli.toml", "[topology]\ngpus_per_node = 3\n");
  ScopedEnv env("PARTRAIN_SITE_CONFIG", env_file);
  auto from_env = load_site_config();
  ASSERT_TRUE(from_env.is_ok()) << from_env.status().message();
  EXPECT_EQ(from_env->gpus_per_node, 2);
  EXPECT_EQ(from_env->path, env_file);
  auto from_cli = load_site_config(cli_file);
  ASSERT_TRUE(from_cli.is_ok());
  EXPECT_EQ(from_cli->gpus_per_node, 3);

  // A file named explicitly must exist.
  auto missing = load_site_config((dir.path() / "absent.toml").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), (dir.path() / "absent.toml").string() +
                                            ": no such site config (named by --site-config); "
                                            "check the path");
  ScopedEnv env_missing("PARTRAIN_SITE_CONFIG", (dir.path() / "gone.toml").string());
  auto missing_env = load_site_config();
  ASSERT_FALSE(missing_env.is_ok());
  EXPECT_NE(missing_env.status().message().find("(named by PARTRAIN_SITE_CONFIG)"),
            std::string::npos);
}

TEST(SiteConfig, AbsentCompiledInFileMeansDefaults) {
  if (std::filesystem::exists(default_site_config_path())) {
    GTEST_SKIP() << default_site_config_path() << " is installed on this machine";
  }
  ScopedEnv env("PARTRAIN_SITE_CONFIG", std::nullopt);
  auto site = load_site_config();
  ASSERT_TRUE(site.is_ok()) << site.status().message();
  EXPECT_EQ(site->path, "");
  EXPECT_EQ(site->plugin_dir, default_plugin_dir());
}

TEST(SiteConfig, EnvironmentLogLevelBeatsTheSiteFile) {
  const log::Level before = log::level();
  SiteConfig site;
  site.log_level = log::Level::kWarn;
  {
    ScopedEnv env("PARTRAIN_LOG_LEVEL", std::nullopt);
    apply_log_level(site);
    EXPECT_EQ(log::level(), log::Level::kWarn);
  }
  {
    ScopedEnv env("PARTRAIN_LOG_LEVEL", "error");
    apply_log_level(site);
    EXPECT_EQ(log::level(), log::Level::kError);
  }
  log::set_level(before);
}

TEST(SiteConfig, KnownKeysComeFromTheParserTable) {
  EXPECT_EQ(known_site_keys(),
            (std::vector<std::string>{"paths.plugin_dir", "paths.state_root", "paths.hardware_dir",
                                      "topology.gpus_per_node", "topology.nvlink_domain",
                                      "topology.file", "rendezvous.port_base", "rendezvous.port_range",
                                      "defaults.spec", "agent.progress_timeout", "log.level"}));
}

}  // namespace
}  // namespace partrain::config
