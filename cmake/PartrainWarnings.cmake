# Warnings every partrain target is built with; CI adds -Werror through PARTRAIN_WERROR.
add_library(partrain_warnings INTERFACE)
target_compile_options(partrain_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wno-missing-field-initializers>)
if(PARTRAIN_WERROR)
  target_compile_options(partrain_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
# GCC 12 at -O3 (Release) warns -Wrestrict inside libstdc++ wherever a 1-char literal is
# assigned to or prepended to a std::string (s = "F"; "'" + std::string(v)): 18 sites here,
# each inlined operator=/operator+ -> _M_replace -> _S_copy -> __builtin_memcpy of "9223372036854775810
# or more bytes", a size no string can have. False positives, GCC bugs 105329 and 105651; -O2
# (RelWithDebInfo, CI's -Werror tree) keeps -Wrestrict. tests/packaging/release_warnings.sh
# compiles sites of both kinds with the Release flags and these, so CI proves it without a
# Release tree.
set(PARTRAIN_RELEASE_CXX_WARNING_FLAGS "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  set(PARTRAIN_RELEASE_CXX_WARNING_FLAGS -Wno-restrict)
endif()
target_compile_options(partrain_warnings INTERFACE
  "$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:${PARTRAIN_RELEASE_CXX_WARNING_FLAGS}>")
