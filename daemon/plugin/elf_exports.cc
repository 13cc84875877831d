// See elf_exports.h.
#include "plugin/elf_exports.h"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/read_file.h"

namespace partrain::plugin {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
#elif defined(__powerpc64__)
constexpr uint16_t kMachine = EM_PPC64;
#else
#error "partrain plugins: add this machine's ELF e_machine"
#endif

// Bounds no real library comes near, so a hostile header cannot make the reader allocate
// or loop without end.
constexpr uint64_t kMaxSymbols = uint64_t{1} << 24;
constexpr uint64_t kMaxStrtab = uint64_t{256} << 20;
constexpr uint64_t kMaxTableEntries = uint64_t{1} << 20;

class Reader {
 public:
  Reader(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  uint64_t size() const { return size_; }

  // Reads exactly n bytes at `offset`, or says the file is too short.
  Status read(uint64_t offset, void* dst, uint64_t n, const char* what) const {
    if (offset > size_ || n > size_ - offset) return outside(what);
    auto* p = static_cast<char*>(dst);
    uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return outside(what);
      done += static_cast<uint64_t>(r);
    }
    return Status::ok();
  }
  Status outside(const char* what) const {
    return Status::invalid(fmt::format("{}: refused: not a valid shared library (its {} lies outside the file); "
                                       "rebuild it as a MODULE library", path_, what));
  }
  Status invalid(const std::string& why) const {
    return Status::invalid(fmt::format("{}: refused: {}; rebuild it as a MODULE library for this machine", path_, why));
  }

 private:
  int fd_;
  uint64_t size_;
  std::string path_;
};

struct Segment {
  uint64_t vaddr, filesz, offset;
};

// The file offset of address [addr, addr + n) when the file holds all of it.
std::optional<uint64_t> file_offset(const std::vector<Segment>& loads, uint64_t addr, uint64_t n) {
  for (const Segment& s : loads) {
    if (addr >= s.vaddr && addr - s.vaddr <= s.filesz && n <= s.filesz - (addr - s.vaddr)) {
      return s.offset + (addr - s.vaddr);
    }
  }
  return std::nullopt;
}

// The number of dynamic symbols, from DT_HASH's nchain or by walking DT_GNU_HASH.
Result<uint64_t> symbol_count(const Reader& r, const std::vector<Segment>& loads, uint64_t hash,
                              uint64_t gnu_hash) {
  if (hash != 0) {
    std::optional<uint64_t> at = file_offset(loads, hash, 8);
    if (!at) return r.outside("DT_HASH table");
    uint32_t words[2];
    PARTRAIN_RETURN_IF_ERROR(r.read(*at, words, sizeof words, "DT_HASH table"));
    return uint64_t{words[1]};
  }
  if (gnu_hash == 0) return r.invalid("it has neither DT_HASH nor DT_GNU_HASH, so its symbols cannot be counted");
  std::optional<uint64_t> at = file_offset(loads, gnu_hash, 16);
  if (!at) return r.outside("DT_GNU_HASH table");
  uint32_t head[4];  // nbuckets, symoffset, bloom_size, bloom_shift
  PARTRAIN_RETURN_IF_ERROR(r.read(*at, head, sizeof head, "DT_GNU_HASH table"));
  if (head[0] > kMaxTableEntries || head[2] > kMaxTableEntries) return r.outside("DT_GNU_HASH table");
  const uint64_t buckets_at = *at + 16 + uint64_t{head[2]} * 8;
  std::vector<uint32_t> buckets(head[0]);
  PARTRAIN_RETURN_IF_ERROR(r.read(buckets_at, buckets.data(), buckets.size() * 4, "DT_GNU_HASH buckets"));
  uint32_t last = 0;
  for (uint32_t b : buckets) last = std::max(last, b);
  if (last < head[1]) return uint64_t{head[1]};  // no hashed symbol
  // Walk the last bucket's chain to its end marker (the low bit).
  const uint64_t chains_at = buckets_at + buckets.size() * 4;
  for (uint64_t i = last;; ++i) {
    if (i - head[1] > kMaxSymbols) return r.outside("DT_GNU_HASH chain");
    uint32_t v = 0;
    PARTRAIN_RETURN_IF_ERROR(r.read(chains_at + (i - head[1]) * 4, &v, 4, "DT_GNU_HASH chain"));
    if (v & 1u) return i + 1;
  }
}

}  // namespace

Result<std::map<std::string, ElfExport>> read_elf_exports(const std::string& path) {
  Result<RegularFile> file = open_regular_file(path, "plugin");
  if (!file) return file.status();
  const Reader r(file->fd(), static_cast<uint64_t>(file->size()), path);
  Elf64_Ehdr eh{};
  if (r.size() < sizeof eh || !r.read(0, &eh, sizeof eh, "ELF header") ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return r.invalid("it is not an ELF shared library");
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != kMachine) {
    return r.invalid(fmt::format("it is built for another machine (ELF class {}, data {}, e_machine {}; this "
                                 "one is 64-bit little-endian e_machine {})", eh.e_ident[EI_CLASS],
                                 eh.e_ident[EI_DATA], eh.e_machine, kMachine));
  }
  if (eh.e_type != ET_DYN) return r.invalid("it is an ELF file but not a shared library (e_type is not ET_DYN)");
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum == PN_XNUM) {
    return r.invalid("its program headers are missing or malformed");
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  PARTRAIN_RETURN_IF_ERROR(r.read(eh.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr), "program headers"));
  std::vector<Segment> loads;
  const Elf64_Phdr* dyn_ph = nullptr;
  for (const Elf64_Phdr& p : ph) {
    if (p.p_type == PT_LOAD) loads.push_back({p.p_vaddr, p.p_filesz, p.p_offset});
    if (p.p_type == PT_DYNAMIC) dyn_ph = &p;
  }
  if (dyn_ph == nullptr) return r.invalid("it has no dynamic section (PT_DYNAMIC), so it exports nothing");
  if (dyn_ph->p_filesz / sizeof(Elf64_Dyn) > kMaxTableEntries) return r.outside("dynamic section");
  std::vector<Elf64_Dyn> dyn(dyn_ph->p_filesz / sizeof(Elf64_Dyn));
  PARTRAIN_RETURN_IF_ERROR(r.read(dyn_ph->p_offset, dyn.data(), dyn.size() * sizeof(Elf64_Dyn), "dynamic section"));
  uint64_t symtab = 0, strtab = 0, strsz = 0, syment = 0, hash = 0, gnu_hash = 0;
  for (const Elf64_Dyn& d : dyn) {
    if (d.d_tag == DT_NULL) break;
    if (d.d_tag == DT_SYMTAB) symtab = d.d_un.d_ptr;
    if (d.d_tag == DT_STRTAB) strtab = d.d_un.d_ptr;
    if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
    if (d.d_tag == DT_SYMENT) syment = d.d_un.d_val;
    if (d.d_tag == DT_HASH) hash = d.d_un.d_ptr;
    if (d.d_tag == DT_GNU_HASH) gnu_hash = d.d_un.d_ptr;
  }
  if (symtab == 0 || strtab == 0 || syment != sizeof(Elf64_Sym) || strsz > kMaxStrtab) {
    return r.invalid("its dynamic symbol table (DT_SYMTAB, DT_STRTAB, DT_SYMENT) is missing or malformed");
  }
  Result<uint64_t> count = symbol_count(r, loads, hash, gnu_hash);
  if (!count) return count.status();
  if (*count > kMaxSymbols) return r.outside("dynamic symbol table");
  const std::optional<uint64_t> sym_at = file_offset(loads, symtab, *count * sizeof(Elf64_Sym));
  const std::optional<uint64_t> str_at = file_offset(loads, strtab, strsz);
  if (!sym_at) return r.outside("dynamic symbol table");
  if (!str_at) return r.outside("dynamic string table");
  std::vector<Elf64_Sym> syms(*count);
  PARTRAIN_RETURN_IF_ERROR(r.read(*sym_at, syms.data(), syms.size() * sizeof(Elf64_Sym), "dynamic symbol table"));
  std::string strings(strsz, '\0');
  PARTRAIN_RETURN_IF_ERROR(r.read(*str_at, strings.data(), strsz, "dynamic string table"));
  std::map<std::string, ElfExport> out;
  for (size_t i = 1; i < syms.size(); ++i) {
    const Elf64_Sym& s = syms[i];
    const int bind = ELF64_ST_BIND(s.st_info);
    if (s.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE)) continue;
    if (s.st_name >= strings.size()) return r.outside("symbol name");
    const size_t end = strings.find('\0', s.st_name);
    if (end == std::string::npos) return r.outside("symbol name");
    ElfExport e;
    e.size = s.st_size;
    e.object = ELF64_ST_TYPE(s.st_info) == STT_OBJECT;
    if (e.object && s.st_size >= 4) {
      if (std::optional<uint64_t> at = file_offset(loads, s.st_value, 4); at) {
        uint32_t w = 0;
        if (r.read(*at, &w, 4, "symbol value")) e.first_word = w;
      }
    }
    out[strings.substr(s.st_name, end - s.st_name)] = e;
  }
  return out;
}

}  // namespace partrain::plugin
