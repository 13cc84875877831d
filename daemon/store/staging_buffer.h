// Host memory a checkpoint's snapshot is copied into, kept from one save to the next.
// A fresh std::vector per save zero-fills its pages and then takes a page fault on each
// 4 KiB of them: on a 150 MiB shard that was most of an asynchronous save's stall. This
// buffer is allocated once (grown when a save needs more), never zero-filled, and asks for
// transparent huge pages, so every save after the first copies into pages already mapped.
// On GPU ranks it is page-locked (Backend::pin_host), so the device copies into it at full
// PCIe/NVLink-C2C speed instead of through the driver's pageable bounce buffer.
#pragma once

#include <cstddef>

namespace partrain::engine {
class Backend;
}

namespace partrain::store {

class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  ~StagingBuffer();

  // Room for at least `floats` elements, pinned through `backend` when it pins; the
  // contents are not kept when it grows. The backend must outlive the buffer.
  void reserve(size_t floats, engine::Backend& backend);
  float* data() { return data_; }
  const float* data() const { return data_; }

 private:
  void release();

  float* data_ = nullptr;
  size_t floats_ = 0;
  engine::Backend* pinned_by_ = nullptr;  // set while the pages are page-locked
};

}  // namespace partrain::store
