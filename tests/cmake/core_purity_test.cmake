# Unit test of cmake/scan_core_includes.cmake, the build-time half of cmake/core_purity.cmake:
# deliberate violations in scratch files must fail the scan, and clean files must pass.
#   cmake -DSCANNER=cmake/scan_core_includes.cmake -DWORK=DIR -P core_purity_test.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/allowed" "common/wire.hpp\ncommon/ids.hpp\n")
set(failures 0)

# expect(NAME pass|fail PROFILE TEXT [MESSAGE]): scans one file holding TEXT.
function(expect name outcome profile text)
  set(f "${WORK}/${name}.hpp")
  file(WRITE "${f}" "${text}")
  file(WRITE "${WORK}/${name}.files" "${f}\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -DFILES_LIST=${WORK}/${name}.files
                          -DALLOWED_LIST=${WORK}/allowed -DPROFILE=${profile} -DTARGET=${name}
                          -P ${SCANNER}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(outcome STREQUAL "pass" AND NOT rc EQUAL 0)
    message(SEND_ERROR "${name}: expected to pass, failed:\n${err}")
  elseif(outcome STREQUAL "fail" AND rc EQUAL 0)
    message(SEND_ERROR "${name}: expected to fail, passed")
  elseif(outcome STREQUAL "fail" AND ARGC GREATER 4 AND NOT err MATCHES "${ARGV4}")
    message(SEND_ERROR "${name}: failed without saying '${ARGV4}':\n${err}")
  else()
    message(STATUS "${name}: ${outcome} as expected")
  endif()
endfunction()

expect(clean pass pure "#include \"common/wire.hpp\"\n#include \"mcdist.pb.h\"\n#include <vector>\nint f();\n")
expect(asio_include fail pure "#include <vector>\n#include <boost/asio/io_context.hpp>\n" "hpp:2: includes <boost/asio")
expect(asio_in_storage fail storage "#include <boost/asio.hpp>\n" "includes <boost/asio")
expect(socket_include fail storage "#include <sys/socket.h>\n" "includes <sys/socket.h>")
expect(shell_header fail pure "#include \"common/net/udp.hpp\"\n" "common/net/udp.hpp")
expect(file_io_pure fail pure "#include <fstream>\n" "includes <fstream>")
expect(file_io_storage pass storage "#include <fstream>\n#include <thread>\n")
expect(clock_read fail pure "auto t = std::chrono::steady_clock::now();\n" "reads a clock")
expect(clock_in_comment pass pure "// never steady_clock::now() here\n/// nor std::random_device\n")
expect(random_device fail pure "std::mt19937 g{std::random_device{}()};\n" "global randomness")
expect(clock_in_storage pass storage "auto t = std::chrono::steady_clock::now();\n")
expect(clock_alias fail pure "using clock = std::chrono::steady_clock;\n" "reads a clock")
expect(alias_read fail pure "auto t = clock::now();\n" "reads a clock")
expect(clock_types pass pure "using tp = std::chrono::steady_clock::time_point;\nusing d = std::chrono::system_clock::duration;\n")
