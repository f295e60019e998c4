# check_exports.cmake -- libskipq exports the skipq_* calls its public
# headers mark SKIPQ_API, and nothing else: no internal sq_* function, no
# stray global. Run by ctest (test "exports"):
#   cmake -DLIB=libskipq.so -DNM=nm -DHEADERS="skipq.h;version.h" -P check_exports.cmake
#
# Left out of the comparison: the symbols every shared object carries
# (_init, _fini, the linker's _end/_edata/__bss_start), and those the
# sanitizers add to an instrumented build (__asan_*, __ubsan_*, __tsan_*,
# __sanitizer_*, __odr_asan_*).
cmake_minimum_required(VERSION 3.25)
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
  string(REGEX MATCHALL "SKIPQ_API[^;(]*[ *](skipq_[a-z0-9_]+)\\(" decls "${text}")
  foreach(d ${decls})
    string(REGEX REPLACE ".*[ *](skipq_[a-z0-9_]+)\\($" "\\1" name "${d}")
    list(APPEND declared ${name})
  endforeach()
endforeach()

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
  message(FATAL_ERROR "exported but not declared SKIPQ_API in a public header: ${extra}")
endif()
if(missing)
  string(REPLACE ";" " " missing "${missing}")
  message(FATAL_ERROR "declared SKIPQ_API but not exported: ${missing}")
endif()
