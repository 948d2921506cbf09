# Embedding (issue 15): the tests of kiln as an installed library.

# Concurrency tests (InferQueue, engines shared by threads) build into their own executable and
# carry the ctest label "concurrency": `ctest -L concurrency` (e.g. in a ThreadSanitizer build).
file(GLOB KILN_CONCURRENCY_TEST_SOURCES CONFIGURE_DEPENDS tests/unit/*/*_concurrency_test.cpp)
add_executable(kiln_concurrency_tests ${KILN_CONCURRENCY_TEST_SOURCES})
target_include_directories(kiln_concurrency_tests PRIVATE ${CMAKE_SOURCE_DIR}/tests)
target_link_libraries(kiln_concurrency_tests PRIVATE kiln_builder kiln_profiles GTest::gtest_main)
gtest_discover_tests(kiln_concurrency_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600 LABELS concurrency)

# Every tool's --help lists every option it accepts (tests/e2e/test_tool_help.py reads the options
# from the tools' sources and the help text).
add_test(NAME tool_help
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/e2e/test_tool_help.py --source-dir ${CMAKE_SOURCE_DIR}
                 --tool engine-build=$<TARGET_FILE:engine-build> --tool engine-run=$<TARGET_FILE:engine-run>
                 --tool engine-perf=$<TARGET_FILE:engine-perf>)

# engine-run as trtexec users expect: no inputs, --warmup/--duration/--export-times, --threads.
add_test(NAME engine_run_cli
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/e2e/test_engine_run_cli.py --engine-build $<TARGET_FILE:engine-build>
                 --engine-run $<TARGET_FILE:engine-run> --workdir ${CMAKE_BINARY_DIR}/engine_run_cli)
set_tests_properties(engine_run_cli PROPERTIES TIMEOUT 900)

if(KILN_HAVE_PYTHON)
  # The Python package from the build tree (the install test runs it again from the prefix).
  add_test(NAME python_package
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/python/test_python_package.py --engine-build $<TARGET_FILE:engine-build>
                   --engine-run $<TARGET_FILE:engine-run> --workdir ${CMAKE_BINARY_DIR}/python_package)
  set_tests_properties(python_package PROPERTIES ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;${KILN_SANITIZER_TEST_ENV}" TIMEOUT 900)
  # examples/python (the seed's inference and control-loop scripts) on the small ControlTransformer.
  add_test(NAME python_examples
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/python/run_examples.py --engine-build $<TARGET_FILE:engine-build>
                   --workdir ${CMAKE_BINARY_DIR}/python_examples)
  set_tests_properties(python_examples PROPERTIES ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;${KILN_SANITIZER_TEST_ENV}" TIMEOUT 900)
  # Installs into a temporary prefix and uses kiln from there only: examples/embed (C++,
  # find_package), examples/c (C, pkg-config) and the Python package, against engine-run.
  add_test(NAME install_and_embed
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/install/test_install.py --source-dir ${CMAKE_SOURCE_DIR}
                   --build-dir ${CMAKE_BINARY_DIR} --workdir ${CMAKE_BINARY_DIR}/install_test)
  set_tests_properties(install_and_embed PROPERTIES ENVIRONMENT "${KILN_SANITIZER_TEST_ENV}" TIMEOUT 1800)
  if(KILN_SANITIZER_TEST_ENV)
    # CPython does not free everything at exit, so leak checks would report the interpreter's
    # memory. These tests (and the tools they start) run without them; every other test checks.
    set_tests_properties(python_package python_examples install_and_embed PROPERTIES
                         ENVIRONMENT_MODIFICATION "ASAN_OPTIONS=string_append::detect_leaks=0")
  endif()
endif()
