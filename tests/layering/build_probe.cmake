# Builds one layering probe (tests/layering/CMakeLists.txt). With HEADER: the build must fail because HEADER is not
# found (GCC: "No such file or directory", Clang: "file not found"). Without: the build must succeed.
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${TARGET}
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
if(NOT DEFINED HEADER)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${TARGET} includes only what its layer declares, yet did not build:\n${output}")
  endif()
  return()
endif()
if(result EQUAL 0)
  message(FATAL_ERROR "${TARGET} built: its layer can include ${HEADER}, an upward include; check the layer's DEPENDS "
    "in cmake/Layers.cmake")
endif()
string(REGEX MATCH "${HEADER}[^\n]*(No such file or directory|file not found)" refused "${output}")
if(NOT refused)
  message(FATAL_ERROR "${TARGET} failed to build, but not because ${HEADER} was not found:\n${output}")
endif()
message(STATUS "${TARGET}: ${HEADER} is out of reach, as it should be")
