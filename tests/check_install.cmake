# check_install.cmake -- what `cmake --install` puts in a prefix: the skipq
# binary, libskipq (with its SONAME link), the public headers (version.h
# generated), and the example plugins only. testkit, which crashes the host
# on request, must never be installed where an operator could load it.
# Run by ctest (test "install"):
#   cmake -DBUILD=build-dir -DPREFIX=scratch-dir -DSOVERSION=N -P check_install.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD} --prefix ${PREFIX} failed (${rc})")
endif()
file(GLOB_RECURSE got RELATIVE ${PREFIX} ${PREFIX}/*)
list(SORT got)
set(want bin/skipq include/skipq/export.h include/skipq/plugin.h include/skipq/plugin_test.h include/skipq/skipq.h
    include/skipq/version.h
    lib/skipq/noop.so lib/skipq/txn_note.so)
file(GLOB libs RELATIVE ${PREFIX} ${PREFIX}/lib/libskipq.so*)
foreach(l lib/libskipq.so lib/libskipq.so.${SOVERSION})
  if(NOT l IN_LIST libs)
    message(FATAL_ERROR "not installed: ${l} (installed: ${libs})")
  endif()
endforeach()
list(REMOVE_ITEM got ${libs})
if(NOT got STREQUAL want)
  string(REPLACE ";" "\n  " got_shown "${got}")
  string(REPLACE ";" "\n  " want_shown "${want}")
  message(FATAL_ERROR "installed:\n  ${got_shown}\nwanted:\n  ${want_shown}")
endif()
file(REMOVE_RECURSE ${PREFIX})
message(STATUS "installed: ${libs};${got}")
