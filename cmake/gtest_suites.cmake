# One CTest test per GoogleTest suite, not per test (docs/testing.md, "One process per suite").
#
# gtest_discover_tests registers every TEST as a CTest test of its own, so CTest starts a
# process for each: under AddressSanitizer a start and LeakSanitizer's check at exit cost 80 to
# 200 ms of CPU, for 855 tests. Here each suite is one test (`<binary>:<Suite>`, run with
# --gtest_filter=<Suite>.*), so a fixture's tests share a process as they do when the binary is
# run by hand (a typed suite, `StoreTest/Sqlite`, is a suite). A value-parameterized test (a `/`
# in the test's name) keeps a CTest test per value (`<binary>:<Suite>.<Test>/<Value>`): the
# head-vs-simulator sweep is four shards so that CTest runs them side by side.
#
# Included by CMakeLists.txt (tessera_discover_suites), and run as a script (-P) after each build
# of a test binary, like gtest_discover_tests' POST_BUILD mode.

if(CMAKE_SCRIPT_MODE_FILE)
  execute_process(COMMAND "${TEST_EXECUTABLE}" --gtest_list_tests
                  WORKING_DIRECTORY "${TEST_WORKING_DIR}" TIMEOUT 60
                  OUTPUT_VARIABLE listing RESULT_VARIABLE listed ERROR_VARIABLE errors)
  if(NOT listed EQUAL 0)
    message(FATAL_ERROR "${TEST_EXECUTABLE} --gtest_list_tests failed (${listed}): ${errors}")
  endif()
  string(REPLACE "\n" ";" lines "${listing}")
  set(script "")
  set(suite "")
  set(pending "")  # the current suite's name while it has no per-test entries
  macro(tessera_suites_flush)
    if(pending)
      string(APPEND script
             "add_test([==[${TEST_TARGET}:${pending}]==] \"${TEST_EXECUTABLE}\" "
             "[==[--gtest_filter=${pending}.*]==])\n"
             "set_tests_properties([==[${TEST_TARGET}:${pending}]==] PROPERTIES "
             "LABELS ${TEST_LABEL} WORKING_DIRECTORY \"${TEST_WORKING_DIR}\")\n")
      set(pending "")
    endif()
  endmacro()
  foreach(line IN LISTS lines)
    string(REGEX REPLACE " *#.*" "" line "${line}")  # "  # GetParam() = ..." comments
    if(line MATCHES "^Running main\\(\\)" OR line STREQUAL "")
      continue()
    endif()
    if(line MATCHES "^  (.+)$")  # a test of the current suite
      set(test "${CMAKE_MATCH_1}")
      if(test MATCHES "^DISABLED_")
        continue()
      endif()
      if(test MATCHES "/")  # a value-parameterized test: one CTest test per value
        string(APPEND script
               "add_test([==[${TEST_TARGET}:${suite}.${test}]==] \"${TEST_EXECUTABLE}\" "
               "[==[--gtest_filter=${suite}.${test}]==])\n"
               "set_tests_properties([==[${TEST_TARGET}:${suite}.${test}]==] PROPERTIES "
               "LABELS ${TEST_LABEL} WORKING_DIRECTORY \"${TEST_WORKING_DIR}\")\n")
      else()
        set(pending "${suite}")
      endif()
    elseif(line MATCHES "^([^ ].*)\\.$")  # a new suite
      tessera_suites_flush()
      set(suite "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  tessera_suites_flush()
  file(WRITE "${CTEST_FILE}" "${script}")
  return()
endif()

set(TESSERA_GTEST_SUITES_SCRIPT "${CMAKE_CURRENT_LIST_FILE}")

# Registers the suites of test binary `target` with CTest, labelled `label`, once it is built.
function(tessera_discover_suites target label)
  set(tests_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  add_custom_command(
    TARGET ${target} POST_BUILD
    BYPRODUCTS "${tests_file}"
    COMMAND "${CMAKE_COMMAND}" -D "TEST_TARGET=${target}"
            -D "TEST_EXECUTABLE=$<TARGET_FILE:${target}>"
            -D "TEST_WORKING_DIR=${CMAKE_CURRENT_BINARY_DIR}" -D "TEST_LABEL=${label}"
            -D "CTEST_FILE=${tests_file}" -P "${TESSERA_GTEST_SUITES_SCRIPT}"
    VERBATIM)
  file(WRITE "${include_file}"
       "if(EXISTS \"${tests_file}\")\n"
       "  include(\"${tests_file}\")\n"
       "else()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
