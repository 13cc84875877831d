# A real installation: bin/, lib/partrain/plugins/, include/partrain/ (the SDK),
# lib/cmake/partrain/ (so a plugin author writes find_package(partrain)),
# share/man/, etc/partrain/. CPack turns it into a .deb that mirrors the configured
# prefix; for a system package configure with -DCMAKE_INSTALL_PREFIX=/usr (the config
# files then go to /etc/partrain and /etc/slurm, where the binaries look for them), then
# run `cpack -G DEB` in the build folder.
include(CMakePackageConfigHelpers)

install(DIRECTORY include/partrain DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES etc/partrain.toml DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain)
# Hardware profiles for `partrain plan --hardware NAME` (planner/hardware.h).
install(DIRECTORY etc/hardware DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/partrain)
install(DIRECTORY etc/examples DESTINATION ${CMAKE_INSTALL_DATADIR}/partrain)
foreach(section 1 5 8)
  file(GLOB pages ${CMAKE_CURRENT_SOURCE_DIR}/man/*.${section})
  if(pages)
    install(FILES ${pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endif()
endforeach()

install(EXPORT partrainTargets NAMESPACE partrain::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/partrain)
configure_package_config_file(cmake/partrainConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/partrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/partrain
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/partrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/partrainConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/partrainConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/partrain)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME partrain)
set(CPACK_PACKAGE_CONTACT "partrain developers <partrain@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libtomlplusplus3, librocksdb7.8, libgloo0, libopenblas0, libfmt9, libspdlog1.10")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
include(CPack)
