# Embedding (issue 15): kiln as a library people install and link.
#   libkiln_runtime.so (SONAME libkiln_runtime.so.MAJOR.MINOR) and libkiln_runtime.a: the runtime
#     (include/kiln/: engine, execution context, session, streaming session, InferQueue, tensors, status,
#     logging, plugin API, C API). Its dependencies (oneDNN, OpenMP, protobuf) stay private.
#   libkiln_builder.so: the runtime plus the builder (include/kiln/builder.h: kiln::build), like
#     TensorRT's libnvinfer next to its lean runtime; a program links one of the two.
#   the tools, kilnConfig.cmake (find_package(kiln) gives kiln::runtime, kiln::builder, and with
#     COMPONENTS static kiln::runtime_static), kiln.pc, and the Python package `kiln`.
include(CMakePackageConfigHelpers)

add_library(kiln_runtime_shared SHARED $<TARGET_OBJECTS:kiln_runtime_objects> $<TARGET_OBJECTS:kiln_plugins>)
set_target_properties(kiln_runtime_shared PROPERTIES OUTPUT_NAME kiln_runtime EXPORT_NAME runtime VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
target_include_directories(kiln_runtime_shared INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                           $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(kiln_runtime_shared PRIVATE OpenMP::OpenMP_CXX DNNL::dnnl protobuf::libprotobuf ${CMAKE_DL_LIBS})
target_link_options(kiln_runtime_shared PRIVATE ${KILN_NO_UNDEFINED})
target_compile_features(kiln_runtime_shared INTERFACE cxx_std_20)
set_target_properties(kiln_runtime PROPERTIES EXPORT_NAME runtime_static)

set(KILN_PUBLIC_HEADERS
  include/kiln/attributes.h include/kiln/cpu_features.h include/kiln/dtype.h include/kiln/engine.h include/kiln/engine_info.h
  include/kiln/execution_context.h include/kiln/export.h include/kiln/infer_queue.h include/kiln/kiln.h include/kiln/kiln.hpp
  include/kiln/logging.h include/kiln/plugin_api.h include/kiln/session.h include/kiln/shape.h include/kiln/status.h include/kiln/streaming_session.h
  include/kiln/streaming_spec.h include/kiln/entry_spec.h include/kiln/tensor.h ${CMAKE_BINARY_DIR}/include/kiln/version.h)
set(KILN_EXPORTED_TARGETS kiln_runtime_shared)

if(KILN_BUILD_BUILDER)
  add_library(kiln_builder_shared SHARED profiles/api/builder_api.cpp $<TARGET_OBJECTS:kiln_runtime_objects> $<TARGET_OBJECTS:kiln_plugins>)
  set_target_properties(kiln_builder_shared PROPERTIES OUTPUT_NAME kiln_builder EXPORT_NAME builder VERSION ${PROJECT_VERSION}
                        SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  target_include_directories(kiln_builder_shared INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                             $<BUILD_INTERFACE:${CMAKE_BINARY_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  # kiln::build (profiles/api/builder_api.cpp) writes engine-build's report, provenance included.
  target_link_libraries(kiln_builder_shared PRIVATE kiln_history kiln_profiles kiln_builder)
  target_link_options(kiln_builder_shared PRIVATE ${KILN_NO_UNDEFINED})
  target_compile_features(kiln_builder_shared INTERFACE cxx_std_20)
  list(APPEND KILN_PUBLIC_HEADERS include/kiln/builder.h)
  list(APPEND KILN_EXPORTED_TARGETS kiln_builder_shared)
  install(TARGETS engine-build engine-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(TARGETS ${KILN_EXPORTED_TARGETS} EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS kiln_runtime EXPORT kilnStaticTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${KILN_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnStaticTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
configure_package_config_file(cmake/kilnConfig.cmake.in ${CMAKE_BINARY_DIR}/kilnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
# 0.x: a minor release may change the ABI (so does the SONAME).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kilnConfig.cmake ${CMAKE_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
# kiln.pc is relocatable: its prefix is found from its own folder.
file(RELATIVE_PATH KILN_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(cmake/kiln.pc.in ${CMAKE_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The Python package `kiln` (python/): pybind11 and numpy from Debian. Built into build/python/kiln
# (importable from there with PYTHONPATH=build/python) and installed where Debian's python3 looks
# for the prefix: lib/python3/dist-packages for /usr, lib/python3.X/dist-packages otherwise.
if(NOT Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3)   # Debian's, with python3-numpy, python3-pybind11 and python3-torch
endif()
find_package(Python3 COMPONENTS Interpreter Development.Module)
find_package(pybind11 CONFIG QUIET)
if(KILN_BUILD_BUILDER AND pybind11_FOUND AND Python3_FOUND)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(KILN_PYTHON_DEFAULT_DIR lib/python3/dist-packages)
  else()
    set(KILN_PYTHON_DEFAULT_DIR lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/dist-packages)
  endif()
  set(KILN_PYTHON_INSTALL_DIR ${KILN_PYTHON_DEFAULT_DIR} CACHE STRING "Where the Python package kiln is installed, relative to the prefix")
  file(GLOB KILN_PYTHON_SOURCES CONFIGURE_DEPENDS python/*.cpp)
  # NO_EXTRAS: no LTO (a serial LTO link of all of kiln takes minutes; the module is a thin layer)
  pybind11_add_module(kiln_python MODULE NO_EXTRAS ${KILN_PYTHON_SOURCES} profiles/api/builder_api.cpp)
  target_link_libraries(kiln_python PRIVATE kiln_history kiln_profiles kiln_builder kiln_runtime)
  set_target_properties(kiln_python PROPERTIES OUTPUT_NAME _kiln LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/kiln)
  file(GLOB KILN_PYTHON_FILES CONFIGURE_DEPENDS python/kiln/*.py)
  foreach(f ${KILN_PYTHON_FILES})
    get_filename_component(name ${f} NAME)
    configure_file(${f} ${CMAKE_BINARY_DIR}/python/kiln/${name} COPYONLY)
  endforeach()
  install(TARGETS kiln_python LIBRARY DESTINATION ${KILN_PYTHON_INSTALL_DIR}/kiln)
  install(FILES ${KILN_PYTHON_FILES} DESTINATION ${KILN_PYTHON_INSTALL_DIR}/kiln)
  set(KILN_HAVE_PYTHON ON)
else()
  message(STATUS "kiln: the Python package is not built (needs the builder, python3-dev, pybind11-dev)")
  set(KILN_HAVE_PYTHON OFF)
endif()

# bench/infer_queue_bench.cpp: InferQueue throughput, batched against one request at a time.
add_executable(infer-queue-bench bench/infer_queue_bench.cpp)
target_link_libraries(infer-queue-bench PRIVATE kiln_runtime)
