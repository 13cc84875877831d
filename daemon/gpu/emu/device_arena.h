// The emulated GPU's memory: device addresses in a reserved range that the host can never
// touch, each allocation backed by host memory only the module reaches.
//
// The range is one PROT_NONE mapping (reserved, never committed): an address inside it is a
// "device pointer", and a host load or store through it is a SIGSEGV with a stack, as a
// host dereference of cudaMalloc'ed memory would be on a GPU without unified addressing.
// Allocations take consecutive 256-byte aligned addresses (cudaMalloc's alignment) and are
// never reused, so a pointer kept past its free stays invalid. The module's kernels and
// collectives translate a device range to its backing with host_of(), which checks that the
// whole range lies inside one live allocation and that it is read as the dtype it was
// allocated with (a bf16 buffer viewed as fp32 is a bug, not a reinterpretation).
//
// Example: alloc 10 f32 at 0x7f..000, 3 bf16 next at 0x7f..100; host_of(0x7f..004, 8 bytes,
// f32) is the backing + 4; host_of(0x7f..100, 8, f32) fails (bf16 allocation); host_of of a
// heap pointer fails (not device memory).
//
// One per process (a GPU's memory is the process's): the backend allocates, the emulated
// NCCL translates. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "common/dtype.h"
#include "common/status.h"

namespace partrain::gpu::emu {

class DeviceArena {
 public:
  static DeviceArena& get();

  // A device address for `bytes` of `dtype` backed by `host` (owned by the caller, alive
  // until unmap); nullptr when the range is exhausted.
  void* map(void* host, size_t bytes, DType dtype);
  // Forgets the allocation at device address `dev`; its backing, as map() got it.
  void* unmap(void* dev);
  // The host backing of device range [p, p + bytes) read as `dtype`; invalid, naming `what`
  // and what is wrong, when p is not device memory, the range leaves its allocation, or the
  // allocation holds another dtype.
  Result<void*> host_of(const void* p, size_t bytes, DType dtype, const std::string& what) const;
  // Whether p lies in the device range at all.
  bool in_range(const void* p) const;

 private:
  DeviceArena();
  struct Alloc {
    void* host;
    size_t bytes;
    DType dtype;
  };
  char* base_ = nullptr;
  size_t size_ = 0;
  size_t next_ = 0;  // offset of the next allocation
  mutable std::mutex mu_;
  std::map<uintptr_t, Alloc> live_;  // device address -> allocation
};

}  // namespace partrain::gpu::emu
