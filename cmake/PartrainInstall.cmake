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
# the cuda and dev packages); binaries are stripped, their debug information (where the
# build has any) in -dbgsym packages (.ddeb).
include(CMakePackageConfigHelpers)

install(DIRECTORY include/partrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(FILES etc/partrain.toml DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain COMPONENT cli)
# Hardware profiles for `partrain plan --hardware NAME` (planner/hardware.h).
install(DIRECTORY etc/hardware DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain COMPONENT cli)
install(DIRECTORY etc/examples DESTINATION ${CMAKE_INSTALL_DATADIR}/partrain COMPONENT cli)
# Man pages installed gzip -9n compressed (Debian policy 12.1), made at configure time (an
# edited page re-runs cmake); spank_partrain.8 belongs to the spank package.
foreach(section 1 5 8)
  file(GLOB pages CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/man/*.${section})
  foreach(page ${pages})
    get_filename_component(name ${page} NAME)
    set(gz ${CMAKE_CURRENT_BINARY_DIR}/man-gz/${name}.gz)
    file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/man-gz)
    execute_process(COMMAND sh -c "gzip -9n -c '${page}' > '${gz}'" COMMAND_ERROR_IS_FATAL ANY)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${page})
    set(component cli)
    if(name STREQUAL "spank_partrain.8")
      if(NOT TARGET spank_partrain)
        continue()
      endif()
      set(component spank)
    endif()
    install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section} COMPONENT ${component})
  endforeach()
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
partrain_conffiles(spank ${CMAKE_INSTALL_FULL_SYSCONFDIR}/slurm/plugstack.conf.d/partrain.conf)
# The default state_root, world-writable and sticky like /tmp (a site with more than one
# node sets a shared one in partrain.toml). $DPKG_ROOT: dpkg's --instdir (empty on a host).
set(PARTRAIN_STATE_ROOT_DEFAULT /var/lib/partrain)
file(WRITE ${control}.cli/postinst
     "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n"
     "  mkdir -p \"$DPKG_ROOT${PARTRAIN_STATE_ROOT_DEFAULT}\"\n"
     "  chmod 1777 \"$DPKG_ROOT${PARTRAIN_STATE_ROOT_DEFAULT}\"\nfi\n")
# Purge removes the job secrets the SPANK plugin's epilog could not (a node that crashed at
# the job's end) and the state directories left empty; run folders elsewhere are the users'.
file(WRITE ${control}.cli/postrm
     "#!/bin/sh\nset -e\nif [ \"$1\" = purge ]; then\n"
     "  rm -f \"$DPKG_ROOT${PARTRAIN_STATE_ROOT_DEFAULT}\"/slurm-*/job.secret\n"
     "  rmdir \"$DPKG_ROOT${PARTRAIN_STATE_ROOT_DEFAULT}\"/slurm-* \"$DPKG_ROOT${PARTRAIN_STATE_ROOT_DEFAULT}\" "
     "2>/dev/null || true\nfi\n")
foreach(script postinst postrm)
  file(CHMOD ${control}.cli/${script} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
       WORLD_READ WORLD_EXECUTE)
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME partrain)
set(CPACK_PACKAGE_VENDOR "partrain developers")
# The site that builds the packages maintains them: name its address (lintian refuses
# localhost addresses; example.org is a placeholder, not a mailbox).
set(PARTRAIN_DEB_MAINTAINER "partrain packagers <partrain-packagers@example.org>" CACHE STRING
    "Maintainer field of the Debian packages: NAME <EMAIL> of whoever builds and ships them")
set(CPACK_PACKAGE_CONTACT "${PARTRAIN_DEB_MAINTAINER}")
# CPack puts this summary in front of every component's description unless it is CPack's
# own default; each component's description starts with its own synopsis line instead.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_NAME} built using CMake")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# -dbgsym packages (.ddeb) of the binaries' debug information, where the build has any (-g:
# RelWithDebInfo, Debug); a build without it (Release) ships stripped binaries and no .ddeb,
# which would hold symbol tables alone. CPack 3.25 writes a .ddeb's md5sums by its staging
# path and without documentation: cmake/debian-ddeb-fix.sh repairs each after cpack.
if(CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Debug)$")
  set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)
  set(CPACK_PARTRAIN_DDEB_FIX ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-ddeb-fix.sh)
  set(CPACK_POST_BUILD_SCRIPTS ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-ddeb-fix.cmake)
else()
  set(CPACK_STRIP_FILES ON)
endif()
# Packages are for every node: cpack refuses a tree built with -march=native
# (cmake/debian-portable-check.cmake).
set(CPACK_PARTRAIN_NATIVE_FLAGS "")
if(PARTRAIN_NATIVE)
  set(CPACK_PARTRAIN_NATIVE_FLAGS "PARTRAIN_NATIVE=ON")
endif()
string(TOUPPER "${CMAKE_BUILD_TYPE}" build_type_upper)
foreach(var CMAKE_CXX_FLAGS CMAKE_C_FLAGS CMAKE_CXX_FLAGS_${build_type_upper} CMAKE_C_FLAGS_${build_type_upper})
  if("${${var}}" MATCHES "-march=native")
    list(APPEND CPACK_PARTRAIN_NATIVE_FLAGS "${var} has -march=native")
  endif()
endforeach()
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-portable-check.cmake)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_COMPONENTS_ALL cli spank dev)
set(CPACK_DEBIAN_CLI_PACKAGE_NAME partrain)
set(CPACK_COMPONENT_CLI_DESCRIPTION "tensor x pipeline x data parallel training next to Slurm
partrain, partraind, the worker and the strategy plugins; CPU ranks train
with OpenBLAS and Gloo. Needs no CUDA library: for login nodes and CPU nodes
(GPU nodes add partrain-cuda).")
set(CPACK_DEBIAN_CLI_PACKAGE_CONTROL_EXTRA "${control}.cli/conffiles;${control}.cli/postinst;${control}.cli/postrm")
set(CPACK_DEBIAN_SPANK_PACKAGE_NAME partrain-spank)
set(CPACK_COMPONENT_SPANK_DESCRIPTION "Slurm SPANK plugin adding --partrain=SPEC to sbatch, salloc and srun
It checks the layout at submit, gives every task its rank and the job's
coordinator, and reads its settings from /etc/partrain/partrain.toml.")
set(CPACK_DEBIAN_SPANK_PACKAGE_CONTROL_EXTRA "${control}.spank/conffiles")
# Slurm loads only plugins built for its own major.minor: depend on that Slurm, so that apt
# holds an upgrade back rather than letting it stop every submission (merged with the
# Depends dpkg-shlibdeps computes).
if(SLURM_INCLUDE_DIR AND EXISTS ${SLURM_INCLUDE_DIR}/slurm/slurm_version.h)
  file(STRINGS ${SLURM_INCLUDE_DIR}/slurm/slurm_version.h slurm_version_line
       REGEX "^#define SLURM_VERSION_NUMBER 0x[0-9a-fA-F]+")
  string(REGEX REPLACE ".*0x([0-9a-fA-F]+).*" "\\1" slurm_hex "${slurm_version_line}")
  math(EXPR slurm_major "0x${slurm_hex} >> 16" OUTPUT_FORMAT DECIMAL)
  math(EXPR slurm_minor "(0x${slurm_hex} >> 8) & 255" OUTPUT_FORMAT DECIMAL)
  math(EXPR slurm_next_minor "${slurm_minor} + 1")
  set(slurm_mm "${slurm_major}.${slurm_minor}")
  if(slurm_minor LESS 10)
    set(slurm_mm "${slurm_major}.0${slurm_minor}")
  endif()
  set(slurm_next "${slurm_major}.${slurm_next_minor}")
  if(slurm_next_minor LESS 10)
    set(slurm_next "${slurm_major}.0${slurm_next_minor}")
  endif()
  set(CPACK_DEBIAN_SPANK_PACKAGE_DEPENDS
      "slurm-wlm-basic-plugins (>= ${slurm_mm}), slurm-wlm-basic-plugins (<< ${slurm_next}~)")
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_NAME partrain-dev)
set(CPACK_COMPONENT_DEV_DESCRIPTION "plugin SDK for partrain's strategy plugins
Headers and the CMake package (find_package(partrain)) for strategy plugins
built out of tree.")
set(CPACK_COMPONENT_DEV_DEPENDS cli)
if(TARGET partrain_cuda)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME partrain-cuda)
  set(CPACK_COMPONENT_CUDA_DESCRIPTION "GPU module of partrain: the CUDA backend and NCCL communicators
Loaded by partrain where a job runs on GPUs.")
  set(CPACK_COMPONENT_CUDA_DEPENDS cli)
  # The CUDA runtime, cuBLAS and NCCL come from NVIDIA's repository, not Debian's:
  # dpkg-shlibdeps cannot name their packages from a toolkit installed by NVIDIA's
  # installer, so the site names them here (e.g. "cuda-cudart-13-0, libcublas-13-0, libnccl2").
  set(PARTRAIN_CUDA_DEB_DEPENDS "" CACHE STRING "Depends of partrain-cuda on NVIDIA's packages")
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "${PARTRAIN_CUDA_DEB_DEPENDS}")
endif()
# Every package's /usr/share/doc/<package>/: copyright and changelog.gz (lintian's
# errors without them). The changelog's date is SOURCE_DATE_EPOCH's where set (reproducible).
set(deb_doc ${CMAKE_CURRENT_BINARY_DIR}/cpack/doc)
file(MAKE_DIRECTORY ${deb_doc})
string(TIMESTAMP deb_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE ${deb_doc}/changelog
     "partrain (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
     "  * Built from the partrain source tree; its git history is the full changelog.\n\n"
     " -- ${PARTRAIN_DEB_MAINTAINER}  ${deb_date}\n")
execute_process(COMMAND gzip -9nf ${deb_doc}/changelog COMMAND_ERROR_IS_FATAL ANY)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-copyright ${deb_doc}/copyright COPYONLY)
foreach(component ${CPACK_COMPONENTS_ALL})
  string(TOUPPER ${component} upper)
  install(FILES ${deb_doc}/copyright ${deb_doc}/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME} COMPONENT ${component})
endforeach()
include(CPack)
