cmake_minimum_required(VERSION 3.25)
# Scans the files of one target for what its layer may not use (cmake/core_purity.cmake says
# which layers there are). Run at build time by core_purity.cmake, and by
# tests/cmake/core_purity_test.cmake on deliberate violations.
#
#   cmake -DFILES_LIST=F -DALLOWED_LIST=A -DPROFILE=pure|storage -DTARGET=name [-DSTAMP=S]
#         -P scan_core_includes.cmake
#
# FILES_LIST: a file naming the files to scan, one absolute path a line. ALLOWED_LIST: the
# project files (relative to the top, "common/wire.hpp") that a quoted include may name;
# generated protobuf headers (*.pb.h) are always allowed. Fails with every violation found,
# each with its file and line; touches STAMP when there is none.

# Angle includes no pure or storage file may have: Asio and Beast, sockets, the shells' I/O
# libraries.
set(forbidden_everywhere "^(boost/asio|asio[./]|boost/beast|sys/socket\\.h|sys/un\\.h|netinet/|arpa/nameser|sys/epoll\\.h|usrsctp\\.h|sqlite3\\.h|mosquitto\\.h|systemd/)")
# And no pure file: file and directory I/O, threads.
set(forbidden_pure "^(fstream|filesystem|fcntl\\.h|unistd\\.h|sys/stat\\.h|sys/xattr\\.h|sys/statvfs\\.h|dirent\\.h|sys/inotify\\.h|poll\\.h|thread|mutex|condition_variable|future)$")
# Calls no pure file may make (checked outside comments): clock reads, through any alias
# (`clock::now`, `my_clock::now`), and global randomness; and aliases of the standard clocks,
# which would let a later `alias::now()` read one (a pure file names their time_point and
# duration types, never the clock).
set(forbidden_calls "clock::now|clock_gettime|gettimeofday|std::random_device|[^_a-z]srand[(]|[^_a-z]rand[(][)]|getrandom[(]|arc4random|RAND_bytes|using[ \t]+[A-Za-z_0-9]+[ \t]*=[ \t]*std::chrono::(steady|system|high_resolution|file|utc|tai|gps)_clock[ \t]*;")

file(STRINGS "${FILES_LIST}" files)
file(STRINGS "${ALLOWED_LIST}" allowed)
set(problems "")
foreach(f IN LISTS files)
  if(NOT EXISTS "${f}")
    continue()  # removed since configure; the next configure drops it
  endif()
  file(STRINGS "${f}" lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<([^>]+)>")
      set(h "${CMAKE_MATCH_1}")
      if(h MATCHES "${forbidden_everywhere}" OR
         (PROFILE STREQUAL "pure" AND h MATCHES "${forbidden_pure}"))
        list(APPEND problems "${f}:${n}: includes <${h}>")
      endif()
    elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
      set(h "${CMAKE_MATCH_1}")
      if(NOT h MATCHES "\\.pb\\.h$" AND NOT h IN_LIST allowed)
        list(APPEND problems "${f}:${n}: includes \"${h}\", which a ${PROFILE} layer may not use")
      endif()
    elseif(PROFILE STREQUAL "pure" AND NOT line MATCHES "^[ \t]*(//|/?\\*)" AND
           line MATCHES "${forbidden_calls}")
      string(STRIP "${line}" shown)
      list(APPEND problems "${f}:${n}: reads a clock or global randomness: ${shown}")
    endif()
  endforeach()
endforeach()
if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "${TARGET} is a ${PROFILE} layer (cmake/core_purity.cmake): time and "
                      "randomness are injected, I/O lives in the shells (sender/io, receiver/io, "
                      "common/net, common/unicast/io).\n  ${text}")
endif()
if(STAMP)
  file(TOUCH "${STAMP}")
endif()
