# bellows_add_gtest_suites(<target> [ENVIRONMENT ...] [ENVIRONMENT_MODIFICATION ...])
#
# One CTest test per GoogleTest suite of <target> (`<Suite>` runs `<target> --gtest_filter=<Suite>.*`), where
# gtest_discover_tests makes one per test. Why: every process of a test binary first runs LibTorch's static
# initialisers (operator registration), 0.86 s on the 2-core development machine and about 2 s under
# AddressSanitizer, and the unit tests themselves mostly take milliseconds; one process per test spent most of the
# unit suite's time starting up (608 tests, 134 suites). A suite whose tests were all skipped (or that has only
# disabled tests) is reported as skipped; a failing suite's output names the failing test.
# Written by hand: GoogleTest's CMake module discovers tests, not suites.
# The suites are listed after each link (tests/list_gtest_suites.cmake writes <target>_suites.cmake);
# CTest reads the list through the directory's TEST_INCLUDE_FILES.
function(bellows_add_gtest_suites target)
  cmake_parse_arguments(ARG "" "" "ENVIRONMENT;ENVIRONMENT_MODIFICATION" ${ARGN})
  set(_list "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(_include "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${CMAKE_COMMAND}" -DEXECUTABLE=$<TARGET_FILE:${target}> -DOUTPUT=${_list}
      -P "${PROJECT_SOURCE_DIR}/cmake/BellowsListTestSuites.cmake"
    BYPRODUCTS "${_list}"
    VERBATIM)
  # CTest's script language: add_test(<name> <command> <args>...), properties as in CMake.
  string(REPLACE ";" "\\;" _env "${ARG_ENVIRONMENT}")
  string(REPLACE ";" "\\;" _env_mod "${ARG_ENVIRONMENT_MODIFICATION}")
  file(GENERATE OUTPUT "${_include}" CONTENT
"if(EXISTS \"${_list}\")
  include(\"${_list}\")
  foreach(_suite IN LISTS bellows_gtest_suites)
    add_test(\"\${_suite}\" \"$<TARGET_FILE:${target}>\" \"--gtest_filter=\${_suite}.*\")
    set_tests_properties(\"\${_suite}\" PROPERTIES
      WORKING_DIRECTORY \"${CMAKE_CURRENT_BINARY_DIR}\"
      ENVIRONMENT \"${_env}\"
      ENVIRONMENT_MODIFICATION \"${_env_mod}\"
      SKIP_REGULAR_EXPRESSION \"\\\\[  PASSED  \\\\] 0 tests\\\\.\"
      LABELS unit)
  endforeach()
else()
  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${_include}")
endfunction()
