# The layers of src/ and what each may include (docs/architecture.md). Every folder of src/ is a layer; a layer's
# sources are compiled with one include root, ${PROJECT_BINARY_DIR}/layer_roots/<layer>, which holds links to its
# own folder and to the folders of the layers it depends on (transitively), and nothing else. So
# `#include "runtime/budget.hpp"` in src/engine finds no such file: an upward (or undeclared sideways) include
# fails to compile (tests/layering checks that it does). Public headers (include/plimsoll/) are the library's API
# and visible to every layer.
#
# A layer may only depend on layers declared above it, so the list is also the build order, bottom first.

# Declares `name` and the layers it includes; makes its include root.
function(plimsoll_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DEPENDS")
  set(closure ${name})
  foreach(dependency IN LISTS arg_DEPENDS)
    get_property(declared GLOBAL PROPERTY PLIMSOLL_LAYER_CLOSURE_${dependency} SET)
    if(NOT declared)
      message(FATAL_ERROR "layer ${name} depends on ${dependency}, which is not declared before it in "
        "cmake/Layers.cmake; a layer may only depend on layers below it")
    endif()
    get_property(dependency_closure GLOBAL PROPERTY PLIMSOLL_LAYER_CLOSURE_${dependency})
    list(APPEND closure ${dependency_closure})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  set_property(GLOBAL PROPERTY PLIMSOLL_LAYER_CLOSURE_${name} ${closure})

  set(root ${PROJECT_BINARY_DIR}/layer_roots/${name})
  file(REMOVE_RECURSE ${root})
  file(MAKE_DIRECTORY ${root})
  foreach(layer IN LISTS closure)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${layer} ${root}/${layer} SYMBOLIC)
  endforeach()
  set_property(GLOBAL PROPERTY PLIMSOLL_LAYER_ROOT_${name} ${root})
endfunction()

# Compiles `target` as part of `layer`: it sees that layer's include root and the public headers.
function(plimsoll_use_layer target layer)
  get_property(root GLOBAL PROPERTY PLIMSOLL_LAYER_ROOT_${layer})
  if(NOT root)
    message(FATAL_ERROR "${target}: ${layer} is not a layer declared in cmake/Layers.cmake")
  endif()
  target_include_directories(${target} PRIVATE ${root} ${PROJECT_SOURCE_DIR}/include)
  # Debug info and __FILE__ name headers by their place in src/, not by the link they were reached through, so
  # call sites (src/telemetry/recording/call_site_symbolizer.cpp) and debuggers see the real files.
  target_compile_options(${target} PRIVATE -ffile-prefix-map=${root}=${PROJECT_SOURCE_DIR}/src)
endfunction()

# In a layer's folder: its sources (`SOURCES`, or every .cpp of the folder) as the object library plimsoll_<layer>,
# whose objects go into the one installed library, plimsoll.
function(plimsoll_layer_library layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(arg_SOURCES)
    set(sources ${arg_SOURCES})
  else()
    file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  endif()
  add_library(plimsoll_${layer} OBJECT ${sources})
  plimsoll_use_layer(plimsoll_${layer} ${layer})
  # The third-party headers the layers use; linking the libraries themselves is plimsoll's (top-level CMakeLists).
  target_link_libraries(plimsoll_${layer} PRIVATE fmt::fmt nlohmann_json::nlohmann_json Threads::Threads ZLIB::ZLIB)
  plimsoll_warnings(plimsoll_${layer})
  target_sources(plimsoll PRIVATE $<TARGET_OBJECTS:plimsoll_${layer}>)
  set_property(GLOBAL APPEND PROPERTY PLIMSOLL_LAYER_LIBRARIES plimsoll_${layer})
endfunction()

plimsoll_layer(util)
plimsoll_layer(devices DEPENDS util)
plimsoll_layer(backings DEPENDS devices util)
plimsoll_layer(engine DEPENDS backings util)
plimsoll_layer(policy DEPENDS util)
plimsoll_layer(telemetry DEPENDS engine util)
# A Runtime's cuda:N devices join the GPU's shared ledger under PLIMSOLL_SHARE (docs/sharing.md), so runtime sits
# over sharing.
plimsoll_layer(sharing DEPENDS backings devices util)
# The runtime registers its mutex with the engine's fork handlers (engine/fork_handlers.hpp): it sits over the
# engine too.
plimsoll_layer(runtime DEPENDS backings devices engine policy sharing util)
plimsoll_layer(pipeline DEPENDS util)
plimsoll_layer(plan DEPENDS telemetry util)
plimsoll_layer(integrations DEPENDS devices sharing telemetry util)
# The shells over the library: `plimsoll train` (src/train, built when libtorch is found) and the command line.
plimsoll_layer(train DEPENDS devices telemetry util)
plimsoll_layer(cli DEPENDS integrations pipeline plan runtime sharing train)
