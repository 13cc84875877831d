# All third-party dependencies, found once, here. Every one is a Debian 12 package
# installed by scripts/install-deps.sh.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(PkgConfig REQUIRED)

# TOML++ ships a CMake package on Debian 12.
find_package(tomlplusplus REQUIRED)
# CLI11 and fmt: header/config packages.
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)
# nlohmann-json: the JSON parser of every safetensors header, trace and metrics file
# (header only; engine/io/json.cc wraps it).
find_package(nlohmann_json 3.10 REQUIRED)
# RocksDB (only the coordinator's state store links it), the shared library: Debian's
# config names the static archive RocksDB::rocksdb and the .so RocksDB::rocksdb-shared,
# and a package depends on the library package only when it links the .so.
find_package(RocksDB CONFIG QUIET)
add_library(partrain_rocksdb INTERFACE)
if(TARGET RocksDB::rocksdb-shared)
  target_link_libraries(partrain_rocksdb INTERFACE RocksDB::rocksdb-shared)
else()
  find_library(ROCKSDB_LIBRARY NAMES librocksdb.so rocksdb REQUIRED)
  target_link_libraries(partrain_rocksdb INTERFACE ${ROCKSDB_LIBRARY})
  find_path(ROCKSDB_INCLUDE_DIR rocksdb/db.h REQUIRED)
  target_include_directories(partrain_rocksdb INTERFACE ${ROCKSDB_INCLUDE_DIR})
endif()
# Boost.DLL is header-only; it must use std::filesystem rather than Boost.Filesystem.
find_package(Boost 1.74 REQUIRED)
add_library(partrain_boost_dll INTERFACE)
target_link_libraries(partrain_boost_dll INTERFACE Boost::headers ${CMAKE_DL_LIBS})
target_compile_definitions(partrain_boost_dll INTERFACE BOOST_DLL_USE_STD_FS)
# OpenBLAS for CPU GEMMs (cblas_sgemm).
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas REQUIRED)
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)
add_library(partrain_openblas INTERFACE)
target_include_directories(partrain_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(partrain_openblas INTERFACE ${OPENBLAS_LIBRARY})
# Gloo: collectives over TCP for CPU ranks. Debian ships headers and a library, no CMake config.
find_path(GLOO_INCLUDE_DIR gloo/allreduce.h REQUIRED)
find_library(GLOO_LIBRARY gloo REQUIRED)
add_library(partrain_gloo INTERFACE)
target_include_directories(partrain_gloo INTERFACE ${GLOO_INCLUDE_DIR})
target_link_libraries(partrain_gloo INTERFACE ${GLOO_LIBRARY} Threads::Threads)
# hwloc for CPU affinity of worker processes.
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
# Slurm's spank.h for the SPANK plugin (header only: the plugin is loaded by Slurm).
find_path(SLURM_INCLUDE_DIR slurm/spank.h)
# Tokenizers: PCRE2 for pre-tokenizer patterns, Debian's libsentencepiece for SentencePiece models.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_path(SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h REQUIRED)
find_library(SENTENCEPIECE_LIBRARY sentencepiece REQUIRED)
# GoogleTest for the unit tests.
if(PARTRAIN_TESTS)
  find_package(GTest REQUIRED)
endif()
