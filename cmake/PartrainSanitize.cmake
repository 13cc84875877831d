# The sanitizer tree: one build that CI's sanitized unit tests and the fuzz targets share
# (scripts/sanitize.sh configures it: clang, -O1 with line tables, CUDA off).
#   -DPARTRAIN_SANITIZE=ON  every object checked with AddressSanitizer and
#                           UndefinedBehaviorSanitizer (any finding aborts)
#   -DPARTRAIN_FUZZ=ON      also libFuzzer's coverage on every object
#                           (-fsanitize=fuzzer-no-link; the sanitizer runtime defines its hooks,
#                           so programs and unit tests link and run as before) and the targets
#                           of tests/fuzz (fuzz_all). Needs clang (Debian: clang libclang-rt-dev);
#                           implies PARTRAIN_SANITIZE. CPU only: sanitizers skip device code.
if(PARTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "PARTRAIN_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                        "-DCMAKE_C_COMPILER=clang, or run scripts/sanitize.sh")
  endif()
  set(PARTRAIN_SANITIZE ON CACHE BOOL "Build with AddressSanitizer + UBSan" FORCE)
  set(PARTRAIN_CUDA OFF CACHE BOOL "Build the CUDA backend when a toolkit is found" FORCE)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(PARTRAIN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  # The instrumentation keeps clang from vectorising the kernels' `omp simd` loops, which it
  # reports as a warning about this build, not about the code.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    add_compile_options(-Wno-pass-failed)
  endif()
endif()
