# The CUDA backend: built whenever a toolkit is found, so that machines without a GPU
# (CI, laptops) still compile every kernel. Facts: CMake 3.25 knows CUDA only up to
# C++17 for nvcc; NCCL ships no CMake target; the driver library (-lcuda) is never linked
# so binaries start on machines without a driver.
set(PARTRAIN_HAVE_CUDA OFF)
if(PARTRAIN_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Hopper (H100/H200) natively; PTX for 80 lets A100 and newer JIT. Set before
      # enable_language, which otherwise caches nvcc's own default (75 for nvcc 13), and
      # that default is what packages used to ship: no native Hopper code at all.
      set(CMAKE_CUDA_ARCHITECTURES "80-virtual;90" CACHE STRING "CUDA architectures of the kernels")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR)
      add_library(partrain_nccl INTERFACE)
      target_include_directories(partrain_nccl INTERFACE ${NCCL_INCLUDE_DIR})
      target_link_libraries(partrain_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
    endif()
    set(PARTRAIN_HAVE_CUDA ON)
    message(STATUS "partrain: CUDA backend ON (${CMAKE_CUDA_COMPILER_VERSION}), NCCL: ${NCCL_LIBRARY}")
  endif()
endif()
if(NOT PARTRAIN_HAVE_CUDA)
  message(STATUS "partrain: no CUDA toolkit; building CPU parts only")
endif()
