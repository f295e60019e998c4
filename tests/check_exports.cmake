# check_exports.cmake -- a shared library of skipq exports the skipq_*
# calls its public headers mark with its export macro, and nothing else: no
# internal sq_* function, no stray global. Run by ctest: test "exports"
# (libskipq, SKIPQ_API in skipq.h and version.h) and "exports_plugin_test"
# (the plugin test kit, SKIPQ_TEST_API in plugin_test.h: skipq_test_* only):
#   cmake -DLIB=libskipq.so -DNM=nm -DHEADERS="skipq.h;version.h" [-DMARK=SKIPQ_API] -P check_exports.cmake
#
# Left out of the comparison: the symbols every shared object carries
# (_init, _fini, the linker's _end/_edata/__bss_start), and those the
# sanitizers add to an instrumented build (__asan_*, __ubsan_*, __tsan_*,
# __sanitizer_*, __odr_asan_*).
cmake_minimum_required(VERSION 3.25)
if(NOT MARK)
  set(MARK SKIPQ_API)
endif()
execute_process(COMMAND ${NM} -D --defined-only ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${out}")
set(exported "")
foreach(line ${lines})
  if(line MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([^ @]+)")
    set(sym ${CMAKE_MATCH_1})
    if(sym MATCHES "^(_init|_fini|_end|_edata|__bss_start|__(asan|ubsan|tsan|sanitizer|odr_asan)[A-Za-z0-9_.]*)$")
      continue()
    endif()
    list(APPEND exported ${sym})
  endif()
endforeach()

set(declared "")
foreach(h ${HEADERS})
  file(READ ${h} text)
  string(REGEX MATCHALL "${MARK}[^;(]*[ *](skipq_[a-z0-9_]+)\\(" decls "${text}")
  foreach(d ${decls})
    string(REGEX REPLACE ".*[ *](skipq_[a-z0-9_]+)\\($" "\\1" name "${d}")
    list(APPEND declared ${name})
  endforeach()
endforeach()

if(NOT declared)
  message(FATAL_ERROR "no call marked ${MARK} in ${HEADERS}")
endif()
list(SORT exported)
list(REMOVE_DUPLICATES exported)
list(SORT declared)
set(extra ${exported})
list(REMOVE_ITEM extra ${declared})
set(missing ${declared})
if(exported)
  list(REMOVE_ITEM missing ${exported})
endif()
string(REPLACE ";" "\n  " shown "${exported}")
message(STATUS "${LIB} exports:\n  ${shown}")
if(extra)
  string(REPLACE ";" " " extra "${extra}")
  message(FATAL_ERROR "exported but not declared ${MARK} in a public header: ${extra}")
endif()
if(missing)
  string(REPLACE ";" " " missing "${missing}")
  message(FATAL_ERROR "declared ${MARK} but not exported: ${missing}")
endif()
