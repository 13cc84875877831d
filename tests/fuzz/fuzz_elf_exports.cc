// The plugin loader's ELF reader (plugin/elf_exports.h), which decides on a library's
// bytes before dlopen ever runs its code: any file gives its exports or a refusal. The
// bytes go through a memfd, the path the loader reads.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "plugin/elf_exports.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = ::memfd_create("fuzz.so", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  (void)partrain::plugin::read_elf_exports("/proc/self/fd/" + std::to_string(fd));
  ::close(fd);
  return 0;
}
