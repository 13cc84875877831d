# CPACK_PROJECT_CONFIG_FILE (cmake/PartrainInstall.cmake), read by cpack before it builds any
# package: a package runs on every node of a cluster, so a tree that compiles for the build
# machine's CPU alone (-march=native: daemon/engine/CMakeLists.txt) packages nothing.
if(CPACK_PARTRAIN_NATIVE_FLAGS)
  list(JOIN CPACK_PARTRAIN_NATIVE_FLAGS ", " why)
  message(FATAL_ERROR "partrain: this build compiles for the build machine's CPU alone "
                      "(${why}), and a package must run on every node: "
                      "reconfigure with -DPARTRAIN_NATIVE=OFF (and no -march=native in CMAKE_CXX_FLAGS), "
                      "rebuild, then run cpack")
endif()
