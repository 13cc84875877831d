# -DPARTRAIN_FUZZ=ON: the libFuzzer targets of tests/fuzz and the libraries under them,
# every object instrumented for coverage (-fsanitize=fuzzer-no-link) and checked with
# AddressSanitizer and UndefinedBehaviorSanitizer (any finding aborts, so libFuzzer
# reports it as a crash). CPU only; needs clang (Debian: clang libclang-rt-dev).
#   cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPARTRAIN_FUZZ=ON
#   cmake --build build-fuzz --target fuzz_all && bash scripts/fuzz.sh build-fuzz 60
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "PARTRAIN_FUZZ needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++ "
                      "-DCMAKE_C_COMPILER=clang")
endif()
set(PARTRAIN_CUDA OFF CACHE BOOL "" FORCE)
# Line tables only (after the build type's -g, so they win): what a sanitizer report's
# file:line needs, at about three quarters of -g's compile time.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                    -fno-sanitize-recover=undefined -gline-tables-only)
add_link_options(-fsanitize=address,undefined)
add_library(partrain_sdk INTERFACE)
target_include_directories(partrain_sdk INTERFACE ${CMAKE_CURRENT_SOURCE_DIR}/include)
add_subdirectory(daemon)
add_subdirectory(tests/fuzz)
