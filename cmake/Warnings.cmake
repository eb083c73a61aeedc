# One place for the warning set, so GCC 12 and Clang 14 are held to the same bar.
function(plimsoll_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual -Wnull-dereference -Wimplicit-fallthrough)
  # Clang checks the lock annotations (src/util/thread_annotations.hpp): data read without its lock is an error.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety)
  endif()
  if(PLIMSOLL_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
