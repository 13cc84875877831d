// The plugstack.conf arguments of spank_partrain.so: defaults, every key, and strictness.
#include "plugin_args.h"
#include "auto_spec.h"

#include <gtest/gtest.h>

namespace partrain::spank {
namespace {

TEST(PluginArgs, NoArgumentsGiveTheDocumentedDefaults) {
  Result<PluginArgs> a = parse_plugin_args({});
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->nvlink_domain, 0);
  EXPECT_EQ(a->state_root, "/var/lib/partrain");
  EXPECT_EQ(a->port_base, 0);  // any free port, published in the job's state directory
  EXPECT_EQ(a->port_range, 1000);
  EXPECT_EQ(a->topology, "");
  EXPECT_EQ(a->site_config, default_site_config());
  EXPECT_FALSE(a->site_config_named);
  EXPECT_EQ(a->hardware, "");  // --partrain=auto is refused until the admin names a profile
  EXPECT_EQ(a->partrain_cli, default_partrain_cli());
  EXPECT_FALSE(a->given.nvlink_domain || a->given.state_root || a->given.port_base || a->given.topology);
}

TEST(PluginArgs, EveryKeyIsRead) {
  Result<PluginArgs> a = parse_plugin_args({"nvlink_domain=8", "state_root=/shared/pt/",
                                            "port_base=40000", "port_range=500",
                                            "topology=/etc/slurm/topology.conf",
                                            "site_config=/shared/partrain.toml", "hardware=H100-SXM",
                                            "partrain_cli=/opt/partrain/bin/partrain"});
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->hardware, "H100-SXM");
  EXPECT_EQ(a->partrain_cli, "/opt/partrain/bin/partrain");
  EXPECT_EQ(a->nvlink_domain, 8);
  EXPECT_EQ(a->state_root, "/shared/pt");  // trailing slash dropped
  EXPECT_EQ(a->port_base, 40000);
  EXPECT_EQ(a->port_range, 500);
  EXPECT_EQ(a->topology, "/etc/slurm/topology.conf");
  EXPECT_EQ(a->site_config, "/shared/partrain.toml");
  EXPECT_TRUE(a->site_config_named);
  EXPECT_TRUE(a->given.nvlink_domain && a->given.state_root && a->given.port_base && a->given.port_range &&
              a->given.topology);
}

TEST(PluginArgs, UnknownKeyIsAnErrorNamingItAndTheKnownKeys) {
  Result<PluginArgs> a = parse_plugin_args({"nvlink_domain=4", "site_conf=/etc/x"});
  ASSERT_FALSE(a.is_ok());
  const std::string& m = a.status().message();
  EXPECT_EQ(m.rfind("partrain: ", 0), 0u) << m;
  EXPECT_NE(m.find("'site_conf=/etc/x'"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("site_config=/ABS/PATH, nvlink_domain=N"), std::string::npos) << m;
}

TEST(PluginArgs, BadValuesAreErrors) {
  for (const char* word : {"nvlink_domain=x", "nvlink_domain=-1", "nvlink_domain=",
                           "state_root=relative/path", "state_root=", "port_base=80",
                           "port_base=70000", "port_range=0", "topology=topo.conf", "novalue", "site_config=x.toml",
                           "=4"}) {
    Result<PluginArgs> a = parse_plugin_args({word});
    EXPECT_FALSE(a.is_ok()) << word;
    if (!a.is_ok()) {
      EXPECT_NE(a.status().message().find(word), std::string::npos) << a.status().message();
    }
  }
}

TEST(PluginArgs, PortsMustStayBelow65536) {
  EXPECT_TRUE(parse_plugin_args({"port_base=65000", "port_range=536"}).is_ok());
  Result<PluginArgs> a = parse_plugin_args({"port_base=65000", "port_range=537"});
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.status().message().find("65535"), std::string::npos);
}

TEST(PluginArgs, CoordinatorPortIsAnyFreeOneUnlessABaseIsSet) {
  PluginArgs a;
  EXPECT_EQ(coordinator_port(a, 1234), 0);
  EXPECT_TRUE(parse_plugin_args({"port_base=0"}).is_ok());
}

TEST(PluginArgs, CoordinatorPortCyclesThroughTheRange) {
  PluginArgs a;
  a.port_base = 29500;  // 29500 + job % 1000
  EXPECT_EQ(coordinator_port(a, 0), 29500);
  EXPECT_EQ(coordinator_port(a, 1234), 29734);
  EXPECT_EQ(coordinator_port(a, 999), 30499);
  EXPECT_EQ(coordinator_port(a, 1000), 29500);
}

}  // namespace
}  // namespace partrain::spank
