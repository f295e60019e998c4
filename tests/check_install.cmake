# check_install.cmake -- what `cmake --install` puts in a prefix: the skipq
# binary, libskipq and the plugin test kit libskipq_plugin_test (each with
# its SONAME link), the public headers (version.h generated), the example
# plugins (noop, txn_note, webhook, ledger) only -- testkit, which crashes the host
# on request, must never be installed where an operator could load it --,
# pkg-config and CMake package files, the migrations, the man pages, the
# documents and the plugin template, the example configuration and the
# systemd unit (under the prefix: only the prefix /usr puts them in /etc and
# /lib/systemd/system, cmake/install.cmake). Nothing else.
# Run by ctest (test "install"):
#   cmake -DBUILD=build-dir -DSOURCE=source-dir -DPREFIX=scratch-dir -DSOVERSION=N -P check_install.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD} --prefix ${PREFIX} failed (${rc})")
endif()
file(GLOB_RECURSE got RELATIVE ${PREFIX} ${PREFIX}/*)
list(SORT got)
set(want bin/skipq etc/skipq/skipq.ini include/skipq/export.h include/skipq/plugin.h include/skipq/plugin_test.h
    include/skipq/skipq.h
    include/skipq/version.h lib/cmake/skipq/skipqConfig.cmake lib/cmake/skipq/skipqConfigVersion.cmake
    lib/cmake/skipq/skipqTargets.cmake lib/pkgconfig/skipq-plugin-test.pc lib/pkgconfig/skipq-plugin.pc
    lib/pkgconfig/skipq.pc
    lib/skipq/ledger.so lib/skipq/noop.so lib/skipq/txn_note.so lib/skipq/webhook.so lib/systemd/system/skipq.service
    share/doc/skipq/README.md share/doc/skipq/changelog.gz share/doc/skipq/copyright
    share/doc/skipq/template/CMakeLists.txt share/doc/skipq/template/Makefile share/doc/skipq/template/hello.c
    share/doc/skipq/template/test_hello.c
    share/man/man1/skipq.1.gz share/man/man5/skipq.ini.5.gz share/man/man7/skipq-plugin.7.gz)
# Every migration and every page of docs/, by name.
file(GLOB sql RELATIVE ${SOURCE}/sql ${SOURCE}/sql/*.sql)
list(TRANSFORM sql PREPEND share/skipq/sql/)
file(GLOB docs RELATIVE ${SOURCE}/docs ${SOURCE}/docs/*.md)
list(TRANSFORM docs PREPEND share/doc/skipq/docs/)
list(APPEND want ${sql} ${docs})
list(SORT want)
file(GLOB libs RELATIVE ${PREFIX} ${PREFIX}/lib/libskipq.so* ${PREFIX}/lib/libskipq_plugin_test.so*)
foreach(l lib/libskipq.so lib/libskipq.so.${SOVERSION} lib/libskipq_plugin_test.so
          lib/libskipq_plugin_test.so.${SOVERSION})
  if(NOT l IN_LIST libs)
    message(FATAL_ERROR "not installed: ${l} (installed: ${libs})")
  endif()
endforeach()
list(REMOVE_ITEM got ${libs})
# The build type names the file of the exported target's locations.
list(FILTER got EXCLUDE REGEX "^lib/cmake/skipq/skipqTargets-[a-z]+\\.cmake$")
if(NOT got STREQUAL want)
  set(extra ${got})
  list(REMOVE_ITEM extra ${want})
  set(missing ${want})
  list(REMOVE_ITEM missing ${got})
  string(REPLACE ";" "\n  " extra "${extra}")
  string(REPLACE ";" "\n  " missing "${missing}")
  message(FATAL_ERROR "installed but not wanted:\n  ${extra}\nwanted but not installed:\n  ${missing}")
endif()
# The unit starts the installed binary with the installed configuration.
file(READ ${PREFIX}/lib/systemd/system/skipq.service unit)
if(NOT unit MATCHES "\nExecStart=/[^\n]*/bin/skipq run -c /[^\n]*/skipq/skipq.ini\n")
  message(FATAL_ERROR "the installed unit's ExecStart is not the installed binary and configuration")
endif()
file(REMOVE_RECURSE ${PREFIX})
list(LENGTH got n)
message(STATUS "installed the ${n} files wanted and ${libs}")
