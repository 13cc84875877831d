// See device_arena.h.
#include "gpu/emu/device_arena.h"

#include <sys/mman.h>

#include <fmt/format.h>

namespace partrain::gpu::emu {
namespace {

// Reserved addresses (no memory is committed to them): far more than a test allocates over
// its life, since freed addresses are never handed out again.
constexpr size_t kReserve = size_t{1} << 40;  // 1 TiB
constexpr size_t kAlign = 256;

}  // namespace

DeviceArena& DeviceArena::get() {
  static DeviceArena arena;
  return arena;
}

DeviceArena::DeviceArena() {
  void* p = ::mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) {
    base_ = static_cast<char*>(p);
    size_ = kReserve;
  }
}

void* DeviceArena::map(void* host, size_t bytes, DType dtype) {
  std::lock_guard lock(mu_);
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (base_ == nullptr || rounded > size_ - next_) return nullptr;
  char* dev = base_ + next_;
  next_ += rounded;
  live_[reinterpret_cast<uintptr_t>(dev)] = Alloc{host, bytes, dtype};
  return dev;
}

void* DeviceArena::unmap(void* dev) {
  std::lock_guard lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(dev));
  if (it == live_.end()) return nullptr;
  void* host = it->second.host;
  live_.erase(it);
  return host;
}

bool DeviceArena::in_range(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return base_ != nullptr && c >= base_ && c < base_ + size_;
}

Result<void*> DeviceArena::host_of(const void* p, size_t bytes, DType dtype, const std::string& what) const {
  if (!in_range(p)) {
    return Status::invalid(fmt::format("{}: {} is not device memory (a host pointer where the GPU needs one of its "
                                       "own); pass a backend tensor", what, p));
  }
  std::lock_guard lock(mu_);
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = live_.upper_bound(addr);
  if (it == live_.begin()) {
    return Status::invalid(fmt::format("{}: device address {} is in no live allocation (freed, or never "
                                       "allocated)", what, p));
  }
  --it;
  const Alloc& a = it->second;
  const size_t offset = addr - it->first;
  if (offset >= a.bytes && bytes > 0) {
    return Status::invalid(fmt::format("{}: device address {} is in no live allocation (freed, or never "
                                       "allocated)", what, p));
  }
  if (offset + bytes > a.bytes) {
    return Status::invalid(fmt::format("{}: {} bytes at {} run past the end of its {}-byte allocation by {} bytes",
                                       what, bytes, p, a.bytes, offset + bytes - a.bytes));
  }
  if (a.dtype != dtype) {
    return Status::invalid(fmt::format("{}: a {} allocation read as {} (elements of {} bytes viewed as {}); "
                                       "pass its own dtype", what, dtype_name(a.dtype), dtype_name(dtype),
                                       dtype_size(a.dtype), dtype_size(dtype)));
  }
  return static_cast<void*>(static_cast<char*>(a.host) + offset);
}

}  // namespace partrain::gpu::emu
