# CPACK_POST_BUILD_SCRIPTS (cmake/PartrainInstall.cmake): every -dbgsym .ddeb CPack just wrote
# beside the packages, repaired by debian-ddeb-fix.sh (correct md5sums, documentation).
set(dirs "")
foreach(file IN LISTS CPACK_PACKAGE_FILES)
  get_filename_component(dir "${file}" DIRECTORY)
  list(APPEND dirs "${dir}")
endforeach()
list(REMOVE_DUPLICATES dirs)
foreach(dir IN LISTS dirs)
  file(GLOB ddebs "${dir}/*-dbgsym_*.ddeb")
  foreach(ddeb IN LISTS ddebs)
    execute_process(COMMAND sh "${CPACK_PARTRAIN_DDEB_FIX}" "${ddeb}" COMMAND_ERROR_IS_FATAL ANY)
  endforeach()
endforeach()
