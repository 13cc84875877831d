// The tensor-parallel side of the plugin loader: opens plugins that export the
// partrain_tensor_v<N> struct of include/partrain/tensor.h, with the refusals every family
// shares (versioned_library.h: unsafe permissions before dlopen, no supported symbol, an
// abi_version that disagrees, a file named differently from the plugin it holds).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "partrain/tensor.h"
#include "plugin/loader.h"

namespace partrain::plugin {

inline constexpr int kTensorAbiVersion = PARTRAIN_TENSOR_ABI_VERSION;
inline constexpr int kOldestTensorAbiVersion = 1;

class TensorPlugin {
 public:
  ~TensorPlugin();
  TensorPlugin(const TensorPlugin&) = delete;
  TensorPlugin& operator=(const TensorPlugin&) = delete;

  const PluginInfo& info() const { return info_; }  // family "tensor"
  const partrain_tensor_v1_t* api() const { return api_; }

  struct Lib;  // Boost.DLL's shared_library, kept out of this header

 private:
  friend Result<std::unique_ptr<TensorPlugin>> open_tensor_plugin(const std::string& path,
                                                                  bool* exports_tensor);
  TensorPlugin() = default;
  std::unique_ptr<Lib> lib_;
  const partrain_tensor_v1_t* api_ = nullptr;
  PluginInfo info_;
};

// Checks the file and its directory, opens it and finds the newest supported
// partrain_tensor_v<N>. *exports_tensor (when not null) says whether it exports any.
Result<std::unique_ptr<TensorPlugin>> open_tensor_plugin(const std::string& path,
                                                         bool* exports_tensor);

// Loads <dir>/<name>.so as a tensor plugin and checks that it calls itself `name`.
Result<std::unique_ptr<TensorPlugin>> find_tensor_plugin(const std::string& dir,
                                                         const std::string& name);

}  // namespace partrain::plugin
