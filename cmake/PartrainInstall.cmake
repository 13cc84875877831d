# A real installation and the Debian packages an admin installs with apt.
#
# Install layout: bin/ (partrain, partraind), libexec/partrain/partrain-worker,
# <libdir>/partrain/plugins/, <libdir>/partrain/libpartrain_cuda.so (the GPU module),
# <libdir>/slurm-wlm/spank_partrain.so, include/partrain/ (the SDK), <libdir>/cmake/partrain/
# (find_package(partrain) for plugin authors), share/man/, share/partrain/examples/, and
# <sysconfdir>/partrain/ and <sysconfdir>/slurm/ for the configuration files. For the
# packages configure with -DCMAKE_INSTALL_PREFIX=/usr (the binaries then look for
# /etc/partrain/partrain.toml and /usr/lib/<arch>/partrain/...), build, and run
# `cpack -G DEB` in the build folder (tests/packaging/package_test.sh does, and installs
# them into a clean root).
#
# One component per package:
#   cli    partrain        every binary and plugin; starts without any CUDA library, for
#                          login nodes and CPU nodes; /etc/partrain/*.toml as conffiles
#   cuda   partrain-cuda   libpartrain_cuda.so: the CUDA backend and NCCL, for GPU nodes
#   spank  partrain-spank  spank_partrain.so and its plugstack.conf.d snippet (conffile)
#   dev    partrain-dev    the plugin SDK headers and CMake package
# Depends are computed by dpkg-shlibdeps from what each binary links (plus partrain for
# the cuda and dev packages); binaries are stripped, their debug symbols in -dbgsym
# packages (.ddeb).
include(CMakePackageConfigHelpers)

install(DIRECTORY include/partrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(FILES etc/partrain.toml DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain COMPONENT cli)
# Hardware profiles for `partrain plan --hardware NAME` (planner/hardware.h).
install(DIRECTORY etc/hardware DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain COMPONENT cli)
install(DIRECTORY etc/examples DESTINATION ${CMAKE_INSTALL_DATADIR}/partrain COMPONENT cli)
foreach(section 1 5 8)
  file(GLOB pages ${CMAKE_CURRENT_SOURCE_DIR}/man/*.${section})
  list(FILTER pages EXCLUDE REGEX "spank_partrain") # the spank package's (slurm/CMakeLists.txt)
  if(pages)
    install(FILES ${pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section} COMPONENT cli)
  endif()
endforeach()

install(EXPORT partrainTargets NAMESPACE partrain::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/partrain COMPONENT dev)
configure_package_config_file(cmake/partrainConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/partrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/partrain
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/partrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/partrainConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/partrainConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/partrain COMPONENT dev)

# ---- Debian packages.

# The maintainer scripts and conffiles lists of each package (control.<component>/).
set(control ${CMAKE_CURRENT_BINARY_DIR}/cpack/control)
function(partrain_conffiles component)
  list(JOIN ARGN "\n" lines)
  file(WRITE ${control}.${component}/conffiles "${lines}\n")
endfunction()
file(GLOB hardware_profiles RELATIVE ${CMAKE_CURRENT_SOURCE_DIR}/etc/hardware ${CMAKE_CURRENT_SOURCE_DIR}/etc/hardware/*.toml)
list(TRANSFORM hardware_profiles PREPEND ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain/hardware/)
partrain_conffiles(cli ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain/partrain.toml ${hardware_profiles})
partrain_conffiles(spank ${CMAKE_INSTALL_FULL_SYSCONFDIR}/slurm/plugstack.conf.d/partrain.conf
                   ${CMAKE_INSTALL_FULL_SYSCONFDIR}/slurm/slurm.conf.d/partrain.conf)
# The default state_root, world-writable and sticky like /tmp (a site with more than one
# node sets a shared one in partrain.toml).
set(PARTRAIN_STATE_ROOT_DEFAULT /var/lib/partrain)
file(WRITE ${control}.cli/postinst
     "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n"
     "  mkdir -p ${PARTRAIN_STATE_ROOT_DEFAULT}\n  chmod 1777 ${PARTRAIN_STATE_ROOT_DEFAULT}\nfi\n")
file(CHMOD ${control}.cli/postinst PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
     WORLD_READ WORLD_EXECUTE)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME partrain)
set(CPACK_PACKAGE_VENDOR "partrain developers")
set(CPACK_PACKAGE_CONTACT "partrain developers <partrain@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_COMPONENTS_ALL cli spank dev)
set(CPACK_DEBIAN_CLI_PACKAGE_NAME partrain)
set(CPACK_COMPONENT_CLI_DESCRIPTION
    "Tensor x pipeline x data parallel training next to Slurm\n"
    "partrain, partraind, the worker and the strategy plugins; CPU ranks train with OpenBLAS and Gloo. "
    "Needs no CUDA library: for login nodes and CPU nodes (GPU nodes add partrain-cuda).")
set(CPACK_DEBIAN_CLI_PACKAGE_CONTROL_EXTRA "${control}.cli/conffiles;${control}.cli/postinst")
set(CPACK_DEBIAN_SPANK_PACKAGE_NAME partrain-spank)
set(CPACK_COMPONENT_SPANK_DESCRIPTION
    "partrain's Slurm SPANK plugin\n"
    "Adds --partrain=SPEC to sbatch, salloc and srun; reads its settings from /etc/partrain/partrain.toml.")
set(CPACK_DEBIAN_SPANK_PACKAGE_CONTROL_EXTRA "${control}.spank/conffiles")
set(CPACK_DEBIAN_DEV_PACKAGE_NAME partrain-dev)
set(CPACK_COMPONENT_DEV_DESCRIPTION "partrain's plugin SDK\nHeaders and the CMake package for strategy plugins built out of tree.")
set(CPACK_COMPONENT_DEV_DEPENDS cli)
if(TARGET partrain_cuda)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME partrain-cuda)
  set(CPACK_COMPONENT_CUDA_DESCRIPTION
      "partrain's GPU module\nThe CUDA backend and NCCL communicators, loaded by partrain where a job runs on GPUs.")
  set(CPACK_COMPONENT_CUDA_DEPENDS cli)
  # The CUDA runtime, cuBLAS and NCCL come from NVIDIA's repository, not Debian's:
  # dpkg-shlibdeps cannot name their packages from a toolkit installed by NVIDIA's
  # installer, so the site names them here (e.g. "cuda-cudart-13-0, libcublas-13-0, libnccl2").
  set(PARTRAIN_CUDA_DEB_DEPENDS "" CACHE STRING "Depends of partrain-cuda on NVIDIA's packages")
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "${PARTRAIN_CUDA_DEB_DEPENDS}")
endif()
include(CPack)
