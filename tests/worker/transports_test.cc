// The plugin ABI's memory flag (include/partrain/data.h, PARTRAIN_HOST_CUDA_BUFFERS): GPU
// ranks tell the data plugin its buffers are device memory, and refuse, naming the file and
// the fix, a plugin that does not take device memory (no PARTRAIN_CAP_CUDA). The shipped
// plugins are loaded for real: dp takes device buffers (it only passes pointers on), and so
// do the ZeRO plugins (on GPU ranks they write into a staged shard the host adds, data.h
// PARTRAIN_HOST_SHARD_STAGED).
#include "worker/transports.h"

#include <string>

#include <gtest/gtest.h>

#include "partrain/data.h"
#include "plugin/data_loader.h"

namespace partrain::worker {
namespace {

TEST(BufferMemory, FeatureBitOnGpuRanksOnly) {
  EXPECT_EQ(buffer_memory_feature("cuda"), PARTRAIN_HOST_CUDA_BUFFERS);
  EXPECT_EQ(buffer_memory_feature("cpu"), 0u);
  // A bit of its own next to the sharding features a plugin already reads.
  const uint64_t shard = PARTRAIN_HOST_SHARD_OPTIMIZER | PARTRAIN_HOST_SHARD_GRADS | PARTRAIN_HOST_SHARD_PARAMS;
  EXPECT_EQ(PARTRAIN_HOST_CUDA_BUFFERS & shard, 0u);
  EXPECT_EQ(PARTRAIN_HOST_CUDA_BUFFERS, uint64_t{1} << 3);  // frozen: plugins are compiled against it
}

TEST(BufferMemory, HostOnlyPluginRefusedOnGpuRanks) {
  EXPECT_TRUE(check_plugin_memory("cpu", PARTRAIN_CAP_CPU, "zero1", "/p/zero1.so").is_ok());
  EXPECT_TRUE(check_plugin_memory("cuda", PARTRAIN_CAP_CPU | PARTRAIN_CAP_CUDA, "dp", "/p/dp.so").is_ok());
  const Status s = check_plugin_memory("cuda", PARTRAIN_CAP_CPU | PARTRAIN_CAP_OVERLAP, "zero1", "/p/zero1.so");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "/p/zero1.so: the data plugin zero1 works on host buffers only (no PARTRAIN_CAP_CUDA), "
            "but [job] device = cuda hands it GPU memory; use plain dp (zero0) on GPUs, or train on "
            "CPU ranks (--device cpu)");
}

TEST(BufferMemory, ShippedPluginsSayWhatMemoryTheyTake) {
  for (const char* name : {"dp", "zero1", "zero2", "zero3"}) {
    Result<std::unique_ptr<plugin::DataPlugin>> p = plugin::DataPlugin::find(PARTRAIN_BUILD_PLUGINDIR, name);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    const uint64_t caps = (*p)->info().capabilities;
    EXPECT_NE(caps & PARTRAIN_CAP_CPU, 0u) << name;
    EXPECT_NE(caps & PARTRAIN_CAP_CUDA, 0u) << name;  // each takes device buffers (zeroN: staged shards)
    EXPECT_TRUE(check_plugin_memory("cuda", caps, name, (*p)->info().path).is_ok()) << name;
  }
}

// The compression plugins (grad=onebit, grad=powersgd) compute on the gradient's values on
// the host, so they take no device buffers and GPU ranks refuse them, naming the file.
TEST(BufferMemory, CompressionPluginsAreRefusedOnGpuRanks) {
  for (const char* name : {"onebit", "powersgd"}) {
    Result<std::unique_ptr<plugin::DataPlugin>> p = plugin::DataPlugin::find(PARTRAIN_BUILD_PLUGINDIR, name);
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    const uint64_t caps = (*p)->info().capabilities;
    EXPECT_NE(caps & PARTRAIN_CAP_CPU, 0u) << name;
    EXPECT_EQ(caps & PARTRAIN_CAP_CUDA, 0u) << name;
    const Status s = check_plugin_memory("cuda", caps, name, (*p)->info().path);
    EXPECT_EQ(s.message(), (*p)->info().path + ": the data plugin " + name +
                               " works on host buffers only (no PARTRAIN_CAP_CUDA), but [job] device = cuda "
                               "hands it GPU memory; use plain dp (zero0) on GPUs, or train on CPU ranks "
                               "(--device cpu)");
  }
}

}  // namespace
}  // namespace partrain::worker
