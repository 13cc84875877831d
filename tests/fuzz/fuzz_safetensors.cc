// A whole safetensors file as `--init` and `export --from` read it (engine/io/safetensors.h):
// the 8-byte header length, the JSON header (nlohmann-json behind json.h), every entry's
// checks, the data section's tiling and the conversion of each tensor to F32. The bytes go
// through a memfd, so the reader's own file path (pread, sizes) is what runs.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  partrain::Result<partrain::engine::io::SafetensorsFile> f = partrain::engine::io::read_safetensors(path);
  if (f) {
    for (const partrain::engine::io::SafeTensor& t : f->tensors) (void)partrain::engine::io::to_f32(t);
  }
  ::close(fd);
  return 0;
}
