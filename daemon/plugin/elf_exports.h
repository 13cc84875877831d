// What a shared object exports, read from the file without loading it: so a plugin is
// refused (no versioned table, an unsupported version, a struct that claims another
// version, a file that is no shared object of this machine) before any of its code runs.
// dlopen() runs a library's constructors, so the loader may call it only on a library that
// passed every check that can be made from the bytes.
//
// How, as the dynamic loader itself finds symbols (so section headers, which a library may
// lack or misstate, are not used): the ELF header, the program headers, PT_DYNAMIC's
// DT_SYMTAB / DT_STRTAB / DT_STRSZ / DT_SYMENT and the symbol count from DT_HASH (nchain)
// or DT_GNU_HASH (the last symbol reached from any bucket's chain); addresses are turned
// into file offsets through the PT_LOAD segments. Every read is checked against the file.
//
// Worked example: tests/plugin/fixtures/v7.so exports `partrain_strategy_v7`, an object of
// 88 bytes; read_elf_exports() returns it with first_word 7 (its abi_version field), so
// the loader refuses it as "unsupported ABI version 7" without dlopen.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "common/status.h"

namespace partrain::plugin {

struct ElfExport {
  uint64_t size = 0;                   // st_size
  bool object = false;                 // STT_OBJECT (a table), not a function
  std::optional<uint32_t> first_word;  // its first 4 bytes as in the file, when stored there
};

// Every defined global or weak dynamic symbol of the ELF shared object at `path`, by name.
// invalid naming the file and the fix when it is no ELF shared object of this machine
// (64-bit, little-endian, this e_machine), or when its tables point outside the file.
Result<std::map<std::string, ElfExport>> read_elf_exports(const std::string& path);

}  // namespace partrain::plugin
