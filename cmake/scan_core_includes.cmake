# Fails if any file in FILES includes Asio or a socket/clock header. Run by core_purity.cmake.
string(REPLACE " " ";" files "${FILES}")
foreach(f IN LISTS files)
  file(STRINGS "${f}" hits REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](boost/asio|asio)")
  if(hits)
    message(FATAL_ERROR "${CORE}: ${f} includes Asio (${hits}); protocol cores must stay pure "
                        "(DESIGN.md). Move the I/O into sender/io or receiver/io.")
  endif()
endforeach()
file(TOUCH "${STAMP}")
