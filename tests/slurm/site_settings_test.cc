// The SPANK plugin's settings from partrain.toml (slurm/site_settings.h): the keys it needs
// are read as partrain reads them, the plugstack line wins, and bad values are load errors
// naming the file and line. Expected values are the files' own text.
#include "site_settings.h"
#include "test_util.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace partrain::spank {
namespace {

class SiteSettings : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const std::string path = dir_ + "/partrain.toml";
    std::ofstream(path) << text;
    return path;
  }
  PluginArgs named(const std::string& path, std::vector<std::string_view> words = {}) {
    std::string arg = "site_config=" + path;
    words.push_back(arg);
    Result<PluginArgs> a = parse_plugin_args(words);
    EXPECT_TRUE(a.is_ok()) << a.status().message();
    return *a;
  }
  const partrain::testing::ScratchDir scratch_{"partrain_spank_site"};
  const std::string dir_ = scratch_.path().string();
};

TEST_F(SiteSettings, TheKeysThePluginNeedsComeFromPartrainToml) {
  PluginArgs a = named(write("# a site\n[paths]\nplugin_dir = \"/usr/lib/partrain/plugins\"\n"
                             "state_root = \"/shared/partrain\"\n\n[topology]\ngpus_per_node = 8\n"
                             "nvlink_domain = 4\nfile = \"topology.conf\"\n\n[rendezvous]\nport_base = 40000\n"
                             "port_range = 100\n\n[log]\nlevel = \"debug\"\n"));
  ASSERT_TRUE(apply_site_config(&a).is_ok());
  EXPECT_EQ(a.state_root, "/shared/partrain");
  EXPECT_EQ(a.nvlink_domain, 4);
  EXPECT_EQ(a.topology, dir_ + "/topology.conf");  // relative to the file's folder, as partrain takes it
  EXPECT_EQ(a.port_base, 40000);
  EXPECT_EQ(a.port_range, 100);
  EXPECT_EQ(coordinator_port(a, 1234), 40034);
}

TEST_F(SiteSettings, ThePlugstackLineWins) {
  PluginArgs a = named(write("[paths]\nstate_root = \"/shared/partrain\"\n[topology]\nnvlink_domain = 4\n"),
                       {"nvlink_domain=8"});
  ASSERT_TRUE(apply_site_config(&a).is_ok());
  EXPECT_EQ(a.nvlink_domain, 8);
  EXPECT_EQ(a.state_root, "/shared/partrain");
}

TEST_F(SiteSettings, AbsentKeysKeepTheDefaults) {
  PluginArgs a = named(write("[log]\nlevel = \"warn\"\n"));
  ASSERT_TRUE(apply_site_config(&a).is_ok());
  EXPECT_EQ(a.state_root, "/var/lib/partrain");
  EXPECT_EQ(a.nvlink_domain, 0);
  EXPECT_EQ(a.port_base, 0);
}

TEST_F(SiteSettings, AMissingFileIsAnErrorOnlyWhenNamed) {
  PluginArgs a = named(dir_ + "/absent.toml");
  Status s = apply_site_config(&a);
  EXPECT_EQ(s.message(), "partrain: site_config=" + dir_ + "/absent.toml: no such file; name the site's partrain.toml");
  PluginArgs quiet;
  quiet.site_config = dir_ + "/absent.toml";  // the compiled-in default, not installed here
  EXPECT_TRUE(apply_site_config(&quiet).is_ok());
  EXPECT_EQ(quiet.state_root, "/var/lib/partrain");
}

TEST_F(SiteSettings, BadValuesNameTheFileTheLineAndTheKey) {
  const std::string path = write("[topology]\n\nnvlink_domain = \"four\"\n");
  PluginArgs a = named(path);
  EXPECT_EQ(apply_site_config(&a).message(),
            "partrain: " + path + ":3: [topology] key 'nvlink_domain' must be an integer from 0 to 65536");
  PluginArgs b = named(write("[rendezvous]\nport_base = 80\n"));
  EXPECT_NE(apply_site_config(&b).message().find("[rendezvous] key 'port_base' must be 0"), std::string::npos);
  PluginArgs c = named(write("[paths\nstate_root = 1\n"));
  const std::string m = apply_site_config(&c).message();
  EXPECT_EQ(m.rfind("partrain: " + dir_ + "/partrain.toml:1: ", 0), 0u) << m;
  PluginArgs d = named(write("[rendezvous]\nport_base = 65000\nport_range = 1000\n"));
  EXPECT_NE(apply_site_config(&d).message().find("runs past port 65535"), std::string::npos);
}

}  // namespace
}  // namespace partrain::spank
