#include "comm/gloo/gloo_store.h"

#include <gloo/common/error.h>

namespace partrain::comm {

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  Status s = client_.set(prefix_ + key, std::string_view(data.data(), data.size()));
  if (!s) throw ::gloo::IoException(s.message());
}

std::vector<char> GlooStore::get(const std::string& key) {
  auto value = client_.get(prefix_ + key, timeout_);
  if (!value) throw ::gloo::IoException(value.status().message());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  Status s = client_.wait(full, timeout);
  if (!s) throw ::gloo::IoException(s.message());
}

}  // namespace partrain::comm
