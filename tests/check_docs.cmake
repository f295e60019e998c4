# check_docs.cmake -- the map of the tree in docs/README.md stays true, and
# docs/tests.md names every suite. Run by ctest (test "docs"):
#   cmake -DSOURCE=source-dir -P check_docs.cmake
# Fails when a file of core/, include/, plugins/, scripts/, conf/, bench/,
# tests/fuzz/ (but its corpus) or the harness is not in the map; when the
# map names a file (NAME.c, NAME.h, ...) that exists nowhere in the tree;
# and when a tests/test_NAME.c is not named in docs/tests.md.
cmake_minimum_required(VERSION 3.25)
file(READ ${SOURCE}/docs/README.md readme)
string(FIND "${readme}" "## The tree" at)
if(at EQUAL -1)
  message(FATAL_ERROR "docs/README.md has no \"## The tree\" section")
endif()
string(SUBSTRING "${readme}" ${at} -1 map)

# Every file in scope is named in the map (by its name, or as NAME.c/h for a pair).
file(GLOB_RECURSE scoped RELATIVE ${SOURCE}
     ${SOURCE}/core/* ${SOURCE}/include/* ${SOURCE}/plugins/* ${SOURCE}/scripts/* ${SOURCE}/conf/*
     ${SOURCE}/bench/* ${SOURCE}/tests/fuzz/*.c ${SOURCE}/tests/fuzz/*.h ${SOURCE}/tests/plugins/*
     ${SOURCE}/tests/harness* ${SOURCE}/tests/*.cmake ${SOURCE}/tests/client_link.c)
set(unmapped "")
foreach(f ${scoped})
  get_filename_component(name ${f} NAME)
  get_filename_component(stem ${f} NAME_WE)
  string(FIND "${map}" "${name}" found)
  if(found EQUAL -1 AND name MATCHES "\\.[ch]$")
    string(FIND "${map}" "${stem}.c/h" found)
  endif()
  if(found EQUAL -1 AND NOT f MATCHES "^tests/fuzz/[a-z_]+\\.dict$")
    list(APPEND unmapped ${f})
  endif()
endforeach()

# Every file the map names exists.
file(GLOB_RECURSE all RELATIVE ${SOURCE} ${SOURCE}/*)
set(names "")
foreach(f ${all})
  if(NOT f MATCHES "^(build|\\.git)")
    get_filename_component(name ${f} NAME)
    list(APPEND names ${name})
  endif()
endforeach()
# Names with other extensions (index.html, app.css) are taken out first, so
# their stems are not read as a .h or .c.
string(REGEX REPLACE "[A-Za-z_0-9.-]+\\.(html|css|js|svg|py|png)" "" map_c "${map}")
string(REGEX MATCHALL "[A-Za-z_0-9.-]+\\.(c/h|cmake|c|h|sh|sql|md|ini|in|service)" named "${map_c}")
set(missing "")
foreach(n ${named})
  if(n MATCHES "^(.*)\\.c/h$")
    set(want ${CMAKE_MATCH_1}.c ${CMAKE_MATCH_1}.h)
  else()
    set(want ${n})
  endif()
  foreach(w ${want})
    if(NOT w IN_LIST names AND NOT w MATCHES "(NAME|NNN_)" AND NOT w STREQUAL "version.h")
      list(APPEND missing ${w})
    endif()
  endforeach()
endforeach()

# Every suite is in docs/tests.md.
file(READ ${SOURCE}/docs/tests.md tests_md)
file(GLOB suites RELATIVE ${SOURCE}/tests ${SOURCE}/tests/test_*.c)
set(undocumented "")
foreach(s ${suites})
  get_filename_component(stem ${s} NAME_WE)
  string(FIND "${tests_md}" "`${stem}`" found)
  if(found EQUAL -1)
    list(APPEND undocumented tests/${s})
  endif()
endforeach()

set(msg "")
if(unmapped)
  list(JOIN unmapped " " l)
  string(APPEND msg "\nnot in the map of docs/README.md: ${l}")
endif()
if(missing)
  list(REMOVE_DUPLICATES missing)
  list(JOIN missing " " l)
  string(APPEND msg "\nnamed in the map of docs/README.md but not in the tree: ${l}")
endif()
if(undocumented)
  list(JOIN undocumented " " l)
  string(APPEND msg "\nsuites missing from docs/tests.md: ${l}")
endif()
if(msg)
  message(FATAL_ERROR "${msg}")
endif()
list(LENGTH scoped n)
list(LENGTH suites ns)
message(STATUS "docs/README.md maps all ${n} files in scope; docs/tests.md names all ${ns} suites")
