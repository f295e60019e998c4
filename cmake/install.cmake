# install.cmake -- what `cmake --install` puts where (GNUInstallDirs), for a
# prefix of one's own (--prefix P: everything under P) and for a system
# install (prefix /usr, as the Debian package: the configuration in /etc,
# the unit in /lib/systemd/system). Included by the top-level CMakeLists.txt.
#
#   bin/skipq                          the binary
#   LIBDIR/libskipq.so.N               the client library (SONAME libskipq.so.N), .so link
#   LIBDIR/libskipq_plugin_test.so.N   the plugin test kit (skipq/plugin_test.h; exports only
#                                      skipq_test_*), .so link
#   include/skipq/*.h                  the public headers, version.h generated
#   LIBDIR/skipq/*.so                  the example plugins (SKIPQ_INSTALLED_PLUGINS: noop,
#                                      txn_note, webhook, ledger; never testkit)
#   LIBDIR/pkgconfig/skipq.pc          the client library for pkg-config
#   LIBDIR/pkgconfig/skipq-plugin.pc   a plugin's headers and flags
#   LIBDIR/pkgconfig/skipq-plugin-test.pc   a plugin's tests: the test kit
#   LIBDIR/cmake/skipq/                find_package(skipq): skipq::client, skipq::plugin,
#                                      skipq::plugin_test, skipq_add_plugin()
#   share/skipq/sql/                   the migrations (the binary has them compiled in)
#   share/man/man{1,5,7}/              skipq(1), skipq.ini(5), skipq-plugin(7) (cmake/man.cmake)
#   share/doc/skipq/                   README.md, the guides, the out-of-tree plugin template
#   SYSCONFDIR/skipq/skipq.ini         the example configuration, its plugin paths the installed ones
#   lib/systemd/system/skipq.service   the unit, its paths the installed ones (SKIPQ_SYSTEMD_UNITDIR)
#
# Paths written into installed files (the unit's ExecStart, the INI's plugin
# paths) are the configured prefix's; the pkg-config and CMake files are
# relocatable, so a staged root (DESTDIR, dpkg -x) can be built against.
include(CMakePackageConfigHelpers)

# A directory GNUInstallDirs makes absolute outside the prefix (/etc for the
# prefix /usr) is installed there; otherwise it stays under the prefix, so
# `cmake --install BUILD --prefix P` keeps everything in P.
function(skipq_install_dir var rel full)
  cmake_path(IS_PREFIX CMAKE_INSTALL_PREFIX "${full}" NORMALIZE under)
  if(IS_ABSOLUTE "${rel}" OR NOT under)
    set(${var} "${full}" PARENT_SCOPE)
  else()
    set(${var} "${rel}" PARENT_SCOPE)
  endif()
endfunction()
skipq_install_dir(SKIPQ_SYSCONF_DEST "${CMAKE_INSTALL_SYSCONFDIR}" "${CMAKE_INSTALL_FULL_SYSCONFDIR}")
# Debian 12 keeps system units in /lib/systemd/system (usr-merged, but
# packages still ship them there); any other prefix keeps it under itself.
set(SKIPQ_SYSTEMD_UNITDIR "" CACHE STRING
    "where the systemd unit goes, relative to the prefix or absolute (empty: /lib/systemd/system for the prefix /usr, else lib/systemd/system)")
if(NOT SKIPQ_SYSTEMD_UNITDIR STREQUAL "")
  set(SKIPQ_UNIT_DEST "${SKIPQ_SYSTEMD_UNITDIR}")
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(SKIPQ_UNIT_DEST /lib/systemd/system)
else()
  set(SKIPQ_UNIT_DEST lib/systemd/system)
endif()
set(SKIPQ_PLUGIN_DEST ${CMAKE_INSTALL_LIBDIR}/skipq)
set(SKIPQ_SQL_DEST ${CMAKE_INSTALL_DATADIR}/skipq/sql)
set(SKIPQ_CMAKE_DEST ${CMAKE_INSTALL_LIBDIR}/cmake/skipq)
set(SKIPQ_PC_DEST ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
foreach(d SYSCONF PLUGIN SQL)
  cmake_path(ABSOLUTE_PATH SKIPQ_${d}_DEST BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX} OUTPUT_VARIABLE SKIPQ_FULL_${d}_DIR)
endforeach()
cmake_path(ABSOLUTE_PATH SKIPQ_UNIT_DEST BASE_DIRECTORY ${CMAKE_INSTALL_PREFIX} OUTPUT_VARIABLE SKIPQ_FULL_UNIT_DIR)

# ---- programs, library, headers, plugins, SQL ------------------------------------------------

install(TARGETS skipq RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS skipq_client skipq_plugin_test EXPORT skipqTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Unspecified)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/skipq DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${CMAKE_BINARY_DIR}/include/skipq/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/skipq)
install(TARGETS ${SKIPQ_INSTALLED_PLUGINS} LIBRARY DESTINATION ${SKIPQ_PLUGIN_DEST})
file(GLOB SKIPQ_SQL_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/sql/*.sql)
install(FILES ${SKIPQ_SQL_FILES} DESTINATION ${SKIPQ_SQL_DEST})

# ---- configuration and unit, with the installed paths ----------------------------------------

# conf/ holds them as a source checkout uses them (/usr/local, /etc/skipq);
# the installed copies name where this build installs. (Written as they
# are, no @VAR@ substitution, and only when they change.)
function(skipq_write path text)
  file(WRITE ${path}.new "${text}")
  file(COPY_FILE ${path}.new ${path} ONLY_IF_DIFFERENT)
endfunction()
file(READ ${CMAKE_SOURCE_DIR}/conf/skipq.ini ini)
string(REPLACE "/usr/local/lib/skipq/" "${SKIPQ_FULL_PLUGIN_DIR}/" ini "${ini}")
string(REPLACE "/etc/skipq/" "${SKIPQ_FULL_SYSCONF_DIR}/skipq/" ini "${ini}")
skipq_write(${CMAKE_BINARY_DIR}/installed/skipq.ini "${ini}")
file(READ ${CMAKE_SOURCE_DIR}/conf/skipq.service unit)
string(REPLACE "/usr/local/bin/skipq" "${CMAKE_INSTALL_FULL_BINDIR}/skipq" unit "${unit}")
string(REPLACE "/etc/skipq" "${SKIPQ_FULL_SYSCONF_DIR}/skipq" unit "${unit}")
string(REPLACE "Documentation=file:///usr/local/share/doc/skipq/README.md"
       "Documentation=man:skipq(1) man:skipq.ini(5) file://${CMAKE_INSTALL_FULL_DOCDIR}/README.md" unit "${unit}")
skipq_write(${CMAKE_BINARY_DIR}/installed/skipq.service "${unit}")
install(FILES ${CMAKE_BINARY_DIR}/installed/skipq.ini DESTINATION ${SKIPQ_SYSCONF_DEST}/skipq)
install(FILES ${CMAKE_BINARY_DIR}/installed/skipq.service DESTINATION ${SKIPQ_UNIT_DEST})

# ---- pkg-config and find_package -------------------------------------------------------------

# The plugin ABI plugin.h declares, for skipq-plugin.pc's `abi` variable.
file(STRINGS ${CMAKE_SOURCE_DIR}/include/skipq/plugin.h abi REGEX "^#define SKIPQ_ABI_M(AJOR|INOR) ")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*" "\\1.\\2" SKIPQ_PLUGIN_ABI "${abi}")
# The .pc files find the prefix from their own directory (${pcfiledir}).
file(RELATIVE_PATH SKIPQ_PC_TO_PREFIX ${CMAKE_INSTALL_PREFIX}/${SKIPQ_PC_DEST} ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" SKIPQ_PC_TO_PREFIX "${SKIPQ_PC_TO_PREFIX}")
foreach(pc skipq skipq-plugin skipq-plugin-test)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/installed/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/installed/${pc}.pc DESTINATION ${SKIPQ_PC_DEST})
endforeach()

install(EXPORT skipqTargets NAMESPACE skipq:: DESTINATION ${SKIPQ_CMAKE_DEST})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/skipqConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/installed/skipqConfig.cmake
                              INSTALL_DESTINATION ${SKIPQ_CMAKE_DEST}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR SKIPQ_PLUGIN_DEST)
# 0.x: a minor release may change what programs see, so only the same minor matches.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/installed/skipqConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/installed/skipqConfig.cmake ${CMAKE_BINARY_DIR}/installed/skipqConfigVersion.cmake
        DESTINATION ${SKIPQ_CMAKE_DEST})

# ---- man pages and documents -----------------------------------------------------------------

set(SKIPQ_MAN_PAGES skipq.1 skipq.ini.5 skipq-plugin.7)
set(SKIPQ_MAN_OUTPUTS "")
foreach(page ${SKIPQ_MAN_PAGES})
  string(REGEX MATCH "[0-9]$" section ${page})
  add_custom_command(
    OUTPUT ${CMAKE_BINARY_DIR}/man/${page}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
    COMMAND ${CMAKE_COMMAND} -DPAGE=${page} -DSKIPQ=$<TARGET_FILE:skipq> -DSOURCE=${CMAKE_SOURCE_DIR}
            -DOUT=${CMAKE_BINARY_DIR}/man -DVERSION=${PROJECT_VERSION} -DETC=${SKIPQ_FULL_SYSCONF_DIR}
            -DPLUGINS=${SKIPQ_FULL_PLUGIN_DIR} -DSQL=${SKIPQ_FULL_SQL_DIR} -DUNIT=${SKIPQ_FULL_UNIT_DIR}
            -DDOCS=${CMAKE_INSTALL_FULL_DOCDIR} -P ${CMAKE_SOURCE_DIR}/cmake/man.cmake
    DEPENDS skipq ${CMAKE_SOURCE_DIR}/cmake/man.cmake ${CMAKE_SOURCE_DIR}/docs/plugins.md
    COMMENT "Writing the man page ${page}")
  list(APPEND SKIPQ_MAN_OUTPUTS ${CMAKE_BINARY_DIR}/man/${page}.gz)
  install(FILES ${CMAKE_BINARY_DIR}/man/${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
add_custom_target(man ALL DEPENDS ${SKIPQ_MAN_OUTPUTS})

install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
file(GLOB SKIPQ_DOC_PAGES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${SKIPQ_DOC_PAGES} DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
# The out-of-tree plugin template, to copy: it builds against this install.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/plugins/template DESTINATION ${CMAKE_INSTALL_DOCDIR})
