# package.cmake -- the Debian package, made by CPack from the install rules
# (cmake/install.cmake). Build it with scripts/package.sh, which configures
# a build with the prefix /usr (so the configuration lands in /etc and the
# unit in /lib/systemd/system), Debian's hardening flags, and runs
# `cpack -G DEB`; tests/check_package.sh checks what comes out (ctest -L
# package).
#
# The package: a `skipq` system user (conf/debian/postinst), the unit
# installed but not enabled, /etc/skipq/skipq.ini a conffile, the runtime
# libraries found by dpkg-shlibdeps, libskipq's shlibs and ldconfig trigger
# generated, copyright and a changelog in /usr/share/doc/skipq.
set(SKIPQ_DEB_DIR ${CMAKE_BINARY_DIR}/debian)
set(SKIPQ_PACKAGE_MAINTAINER "skipq maintainers <skipq@packages.invalid>" CACHE STRING
    "the Debian package's Maintainer field")

# conffiles: every file installed under the system configuration directory.
file(WRITE ${SKIPQ_DEB_DIR}/conffiles.new "${SKIPQ_FULL_SYSCONF_DIR}/skipq/skipq.ini\n")
file(COPY_FILE ${SKIPQ_DEB_DIR}/conffiles.new ${SKIPQ_DEB_DIR}/conffiles ONLY_IF_DIFFERENT)
# A native package's changelog, gzipped without name or time (-9n); its date
# is SOURCE_DATE_EPOCH's when set.
string(TIMESTAMP SKIPQ_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE ${SKIPQ_DEB_DIR}/changelog.new
"skipq (${PROJECT_VERSION}) unstable; urgency=medium

  * skipq ${PROJECT_VERSION}.

 -- ${SKIPQ_PACKAGE_MAINTAINER}  ${SKIPQ_CHANGELOG_DATE}
")
file(COPY_FILE ${SKIPQ_DEB_DIR}/changelog.new ${SKIPQ_DEB_DIR}/changelog ONLY_IF_DIFFERENT)
execute_process(COMMAND gzip -9nc ${SKIPQ_DEB_DIR}/changelog OUTPUT_FILE ${SKIPQ_DEB_DIR}/changelog.gz
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip ${SKIPQ_DEB_DIR}/changelog failed (${rc})")
endif()
install(FILES ${SKIPQ_DEB_DIR}/changelog.gz ${CMAKE_SOURCE_DIR}/conf/debian/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME skipq)
set(CPACK_PACKAGE_VENDOR "skipq")
set(CPACK_PACKAGE_CONTACT "${SKIPQ_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "job queue in PostgreSQL: host, command line, client library")
set(CPACK_PACKAGE_DESCRIPTION "skipq keeps jobs as rows in PostgreSQL and runs them in a host process
whose threads claim them with SKIP LOCKED and hand them to handlers
written as plugins (shared objects). Jobs can be enqueued inside the
application's own transaction. This package holds the skipq binary (host,
command line, dashboard), the client library libskipq with its headers,
pkg-config and CMake files, the plugin headers, example plugins, the
systemd unit (installed, not enabled) and an example configuration.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "postgresql")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/conf/debian/postinst ${CMAKE_SOURCE_DIR}/conf/debian/postrm
    ${CMAKE_SOURCE_DIR}/conf/debian/triggers ${SKIPQ_DEB_DIR}/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
# Absolute destinations (/etc, /lib/systemd/system) are staged under DESTDIR.
set(CPACK_SET_DESTDIR ON)
include(CPack)
