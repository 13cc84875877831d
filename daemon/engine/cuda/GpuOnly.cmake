# PARTRAIN_GPU_ONLY=ON: build only what a bare CUDA machine needs to check the GPU path
# (scripts/gpu-check.sh): the CUDA kernels and backend, the CPU reference kernels they are
# tested against, tests/gpu and bench/gpu. Needs a C++ compiler, CMake and the CUDA toolkit;
# everything else is optional:
#   - OpenBLAS: else tests/gpu/cblas_fallback (a reference sgemm) stands in.
#   - fmt and nlohmann-json (the engine's dependencies), header-only, first found of: a system
#     package; $PARTRAIN_GPU_DEPS_DIR/include/{fmt,nlohmann} (default out/gpu-deps, filled by
#     `scripts/gpu-check.sh --prepare` from this machine's /usr/include and carried to the
#     GPU machine); the copies PyTorch's wheel may ship (torch/include). Without them only the
#     kernels and their tests build (no CudaBackend, no model, bench in layers mode only).
#   - GoogleTest: never used here; tests/gpu/gpu_test.h has a stand-in.
# -DPARTRAIN_GPU_ONLY_MINIMAL=ON ignores every optional dependency: kernels and their tests
# only, reference sgemm (the script's fallback, and a way to try the bare path anywhere).
option(PARTRAIN_GPU_ONLY_MINIMAL "GPU-only build: kernels only, no OpenBLAS, no fmt" OFF)
set(PARTRAIN_GPU_DEPS_DIR ${PROJECT_SOURCE_DIR}/out/gpu-deps CACHE PATH
    "GPU-only build: folder with include/fmt carried from another machine")

include(cmake/PartrainWarnings.cmake)
include(cmake/PartrainCuda.cmake)
if(NOT PARTRAIN_HAVE_CUDA)
  message(FATAL_ERROR "PARTRAIN_GPU_ONLY needs the CUDA toolkit: put nvcc on PATH or pass "
                      "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
endif()
enable_testing()
find_package(Threads REQUIRED)

find_package(OpenMP QUIET)
if(NOT TARGET OpenMP::OpenMP_CXX)
  add_library(OpenMP::OpenMP_CXX INTERFACE IMPORTED)
endif()

add_library(partrain_openblas INTERFACE)
if(NOT PARTRAIN_GPU_ONLY_MINIMAL)
  find_path(OPENBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
  find_library(OPENBLAS_LIBRARY NAMES openblas)
endif()
if(OPENBLAS_INCLUDE_DIR AND OPENBLAS_LIBRARY)
  target_include_directories(partrain_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
  target_link_libraries(partrain_openblas INTERFACE ${OPENBLAS_LIBRARY})
  message(STATUS "partrain (gpu-only): OpenBLAS ${OPENBLAS_LIBRARY}")
else()
  add_library(partrain_cblas_fallback STATIC ${PROJECT_SOURCE_DIR}/tests/gpu/cblas_fallback/cblas_fallback.cc)
  target_include_directories(partrain_cblas_fallback PUBLIC ${PROJECT_SOURCE_DIR}/tests/gpu/cblas_fallback)
  target_link_libraries(partrain_cblas_fallback PRIVATE OpenMP::OpenMP_CXX)
  target_link_libraries(partrain_openblas INTERFACE partrain_cblas_fallback)
  message(STATUS "partrain (gpu-only): no OpenBLAS; reference sgemm from tests/gpu/cblas_fallback")
endif()

if(NOT PARTRAIN_GPU_ONLY_MINIMAL)
  find_package(fmt QUIET)
endif()
function(partrain_header_only_fmt dir what)
  add_library(fmt::fmt INTERFACE IMPORTED GLOBAL)
  target_include_directories(fmt::fmt SYSTEM INTERFACE ${dir})
  target_compile_definitions(fmt::fmt INTERFACE FMT_HEADER_ONLY)
  message(STATUS "partrain (gpu-only): fmt headers from ${what} ${dir}")
endfunction()
if(NOT TARGET fmt::fmt AND NOT PARTRAIN_GPU_ONLY_MINIMAL
   AND EXISTS ${PARTRAIN_GPU_DEPS_DIR}/include/fmt/format.h)
  partrain_header_only_fmt(${PARTRAIN_GPU_DEPS_DIR}/include "the carried")
endif()
if(NOT TARGET fmt::fmt AND NOT PARTRAIN_GPU_ONLY_MINIMAL)
  # PyTorch's wheel may carry fmt's headers; found without importing torch.
  find_program(PARTRAIN_PYTHON3 python3)
  if(PARTRAIN_PYTHON3)
    execute_process(
      COMMAND ${PARTRAIN_PYTHON3} -c
        "import importlib.util, os; s = importlib.util.find_spec('torch'); print(os.path.join(os.path.dirname(s.origin), 'include') if s else '')"
      OUTPUT_VARIABLE partrain_torch_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  if(partrain_torch_include AND EXISTS ${partrain_torch_include}/fmt/format.h)
    # Only fmt/ from that folder: the rest of torch/include must not shadow anything.
    set(partrain_fmt_copy ${CMAKE_BINARY_DIR}/torch-fmt/include)
    file(COPY ${partrain_torch_include}/fmt DESTINATION ${partrain_fmt_copy})
    partrain_header_only_fmt(${partrain_fmt_copy} "PyTorch's wheel, copied to")
  endif()
endif()

# nlohmann-json (the engine's safetensors and JSON reader), header-only: a system package, the
# carried copy, or PyTorch's wheel's.
if(NOT PARTRAIN_GPU_ONLY_MINIMAL)
  find_package(nlohmann_json 3.10 QUIET)
  if(NOT TARGET nlohmann_json::nlohmann_json)
    foreach(dir ${PARTRAIN_GPU_DEPS_DIR}/include ${partrain_torch_include})
      if(dir AND EXISTS ${dir}/nlohmann/json.hpp)
        set(partrain_json_copy ${CMAKE_BINARY_DIR}/json/include)
        file(COPY ${dir}/nlohmann DESTINATION ${partrain_json_copy})
        add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED GLOBAL)
        target_include_directories(nlohmann_json::nlohmann_json SYSTEM INTERFACE ${partrain_json_copy})
        message(STATUS "partrain (gpu-only): nlohmann-json headers from ${dir}")
        break()
      endif()
    endforeach()
  endif()
endif()

if(TARGET fmt::fmt AND TARGET nlohmann_json::nlohmann_json)
  # The whole engine: CPU kernels and backend, CUDA kernels and backend, model, optimizer,
  # and the metrics writer the trainer uses.
  # daemon/gpu: the GPU module's loader, which the engine links (make_backend("cuda")).
  include(GNUInstallDirs)
  add_subdirectory(daemon/common)
  add_subdirectory(daemon/metrics)
  add_subdirectory(daemon/gpu)
  add_subdirectory(daemon/engine)
  message(STATUS "partrain (gpu-only): engine, CUDA backend, kernel/backend/model tests, bench")
else()
  # Kernels only: the CPU reference kernels (as daemon/engine/CMakeLists.txt builds them) and
  # the CUDA kernels.
  add_library(partrain_status INTERFACE)
  target_include_directories(partrain_status INTERFACE ${PROJECT_SOURCE_DIR}/daemon)
  file(GLOB partrain_cpu_kernel_sources ${PROJECT_SOURCE_DIR}/daemon/engine/cpu/*.cc)
  list(FILTER partrain_cpu_kernel_sources EXCLUDE REGEX "cpu_backend\\.cc$")
  add_library(partrain_engine_kernels_cpu STATIC ${partrain_cpu_kernel_sources})
  target_include_directories(partrain_engine_kernels_cpu PUBLIC ${PROJECT_SOURCE_DIR}/daemon)
  target_link_libraries(partrain_engine_kernels_cpu PUBLIC partrain_openblas OpenMP::OpenMP_CXX
                        PRIVATE partrain_warnings)
  target_compile_options(partrain_engine_kernels_cpu PRIVATE -O3 -fno-math-errno)
  add_subdirectory(daemon/engine/cuda)
  message(STATUS "partrain (gpu-only): no fmt or nlohmann-json; CUDA kernels and kernel tests only")
endif()

add_subdirectory(tests/gpu)
add_subdirectory(bench/gpu)
