# Installation layout and the Debian package (CPack DEB generator): deploy/build-deb.sh.
#
# One package, mcdist: /usr/bin/mcdistd, mcdist-send, mcdist-feed, mcdistctl and mcdist-keygen,
# their man pages (help2man, from --help, at build time), the systemd units, sysusers.d/tmpfiles.d/sysctl.d files, the default
# configuration /etc/mcdist/mcdistd.toml (a conffile) and maintainer scripts that create the user
# and directories. The units and the configuration name /usr/bin and /etc/mcdist: the package's
# layout (CPACK_PACKAGING_INSTALL_PREFIX /usr). The /etc files are in the component "conffiles",
# left out of a plain `cmake --install` so that an install under another prefix writes nothing
# outside it.

include(GNUInstallDirs)

# Man pages from --help (Debian help2man). Without help2man the build goes on without them.
find_program(MCDIST_HELP2MAN help2man)
find_program(MCDIST_GZIP gzip)
set(MCDIST_MAN_PAGES)
if(MCDIST_HELP2MAN AND MCDIST_GZIP)
  # program target, section, one-line description, extra help2man arguments
  foreach(spec "mcdistd|8|mcdist receiver daemon: receives multicast file sets and delivers them atomically"
               "mcdist-send|1|send a file set reliably over IP multicast to mcdist receivers"
               "mcdist-keygen|1|make Ed25519 key pairs for mcdist senders and sites"
               "mcdist-feed|8|mcdist hub daemon: multicasts spooled products to the sites, by channel and priority"
               "mcdistctl|1|query and steer the mcdist hub daemon: status, delivery history, missing products, resends")
    string(REPLACE "|" ";" spec "${spec}")
    list(GET spec 0 prog)
    list(GET spec 1 section)
    list(GET spec 2 what)
    set(out ${PROJECT_BINARY_DIR}/man/${prog}.${section})
    add_custom_command(
      OUTPUT ${out}.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      # --no-info: Debian has no info pages for it; --version-string: the release, as the
      # programs' --version prints it, without running them twice; SOURCE_DATE_EPOCH: a
      # reproducible date line.
      COMMAND ${CMAKE_COMMAND} -E env SOURCE_DATE_EPOCH=1767225600
              ${MCDIST_HELP2MAN} --no-info --no-discard-stderr --section=${section}
              --name=${what} --version-string=${PROJECT_VERSION}
              --source=mcdist --output=${out} $<TARGET_FILE:${prog}>
      # -n: no name or time stamp in the .gz (reproducible, lintian)
      COMMAND ${MCDIST_GZIP} -9nf ${out}
      DEPENDS ${prog}
      COMMENT "help2man: ${prog}(${section})"
      VERBATIM)
    list(APPEND MCDIST_MAN_PAGES ${out}.gz)
    install(FILES ${out}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
  endforeach()
  # Not in a sanitizer build's default target: its binaries' --help is no package's, and
  # LeakSanitizer's exit report would fail help2man.
  if(MCDIST_SANITIZE)
    add_custom_target(mcdist_man DEPENDS ${MCDIST_MAN_PAGES})
  else()
    add_custom_target(mcdist_man ALL DEPENDS ${MCDIST_MAN_PAGES})
  endif()
else()
  message(STATUS "help2man or gzip not found: no man pages (Debian package help2man)")
endif()

set(units ${PROJECT_SOURCE_DIR}/deploy/systemd)
install(FILES ${units}/mcdistd.service ${units}/mcdistd@.service ${units}/mcdist-feed.service
        DESTINATION lib/systemd/system)
install(FILES ${units}/mcdist.sysusers DESTINATION lib/sysusers.d RENAME mcdist.conf)
install(FILES ${units}/mcdist.tmpfiles DESTINATION lib/tmpfiles.d RENAME mcdist.conf)
install(FILES ${units}/mcdist.sysctl DESTINATION lib/sysctl.d RENAME 60-mcdist.conf)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/config/mcdistd.toml
              ${PROJECT_SOURCE_DIR}/deploy/config/mcdist-feed.toml
        DESTINATION /etc/mcdist COMPONENT conffiles EXCLUDE_FROM_ALL)

# Debian's documentation files: copyright and a gzipped changelog (lintian requires both).
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
set(changelog ${PROJECT_BINARY_DIR}/debian/changelog.Debian)
file(WRITE ${changelog}
  "mcdist (${PROJECT_VERSION}-1) unstable; urgency=medium\n\n"
  "  * Built from the mcdist source tree with CPack (deploy/build-deb.sh).\n\n"
  " -- mcdist developers <mcdist@example.org>  Thu, 01 Jan 2026 00:00:00 +0000\n")
add_custom_command(
  OUTPUT ${changelog}.gz
  COMMAND ${MCDIST_GZIP} -9nkf ${changelog}
  DEPENDS ${changelog}
  VERBATIM)
add_custom_target(mcdist_changelog ALL DEPENDS ${changelog}.gz)
install(FILES ${changelog}.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mcdist)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "mcdist developers <mcdist@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "reliable multicast file distribution")
set(CPACK_PACKAGE_DESCRIPTION
    "mcdist distributes file sets from one sender to many receiving sites over\n"
    "IP multicast, reliably (NAK-based repair passes, unicast fallback for lossy\n"
    "sites), at a configured rate: the daily flow of a meteorological centre to\n"
    "dozens or hundreds of centres behind terrestrial multicast or a satellite hop.\n"
    "\n"
    "This package holds mcdist-send, the sender, mcdist-feed, the hub daemon that\n"
    "multicasts spooled products by channel and priority, mcdistctl, the hub\n"
    "operator's tool (status, delivery history, missing products, resends),\n"
    "mcdist-keygen, which makes the keys of signed sessions, and mcdistd, the\n"
    "receiver daemon with its systemd service, which verifies the SHA-256 of\n"
    "every file and renames it atomically into its destination tree.")
string(REPLACE ";" "" CPACK_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL Unspecified conffiles)
set(CPACK_DEBIAN_PACKAGE_NAME mcdist)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.org/mcdist")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# systemd-sysusers/tmpfiles create the user and directories when present; passwd (useradd) is
# the fallback in postinst.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "passwd")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
include(CPack)
