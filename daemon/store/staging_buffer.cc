// See staging_buffer.h.
#include "store/staging_buffer.h"

#include <sys/mman.h>

#include <new>

#include "engine/backend.h"

namespace partrain::store {

StagingBuffer::~StagingBuffer() { release(); }

void StagingBuffer::release() {
  if (data_ == nullptr) return;
  if (pinned_by_ != nullptr) pinned_by_->unpin_host(data_);
  munmap(data_, floats_ * sizeof(float));
  data_ = nullptr;
  floats_ = 0;
  pinned_by_ = nullptr;
}

void StagingBuffer::reserve(size_t floats, engine::Backend& backend) {
  if (floats <= floats_) return;
  release();
  const size_t bytes = floats * sizeof(float);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  (void)madvise(p, bytes, MADV_HUGEPAGE);  // a hint: fewer faults and TLB misses where THP is on
  data_ = static_cast<float*>(p);
  floats_ = floats;
  if (backend.pin_host(p, bytes)) pinned_by_ = &backend;
}

}  // namespace partrain::store
