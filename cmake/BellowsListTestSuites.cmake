# cmake -DEXECUTABLE=<gtest binary> -DOUTPUT=<file> -P BellowsListTestSuites.cmake
# Writes `set(bellows_gtest_suites <Suite>...)` from the binary's --gtest_list_tests (cmake/BellowsTestSuites.cmake).
execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc TIMEOUT 120)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests exited with ${_rc}:\n${_out}\n${_err}")
endif()
string(REPLACE "\n" ";" _lines "${_out}")
set(_suites)
foreach(_line IN LISTS _lines)
  # Suite lines start in column 0 and end with '.', maybe followed by "  # TypeParam = ..."; test lines are indented.
  if(_line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.")
    list(APPEND _suites "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(NOT _suites)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests listed no suites:\n${_out}")
endif()
list(REMOVE_DUPLICATES _suites)
file(WRITE "${OUTPUT}.tmp" "set(bellows_gtest_suites ${_suites})\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
