# Warnings every partrain target is built with; CI adds -Werror through PARTRAIN_WERROR.
add_library(partrain_warnings INTERFACE)
target_compile_options(partrain_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wno-missing-field-initializers>)
if(PARTRAIN_WERROR)
  target_compile_options(partrain_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(PARTRAIN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
