# What a layer may use (docs/architecture.md "Layers": a folder says what its code may use),
# checked on every build:
#
#   pure     the protocol cores (sender/core, receiver/core) and the pure parts of common
#            (mcdist_common_core in common/, mcdist_fec in common/fec/, mcdist_unicast_core in
#            common/unicast/): the standard library, protobuf, OpenSSL/libsodium computation,
#            spdlog/fmt for log lines, and other pure files of the project. No Asio or Beast,
#            no sockets, no file I/O, no threads, no clock reads, no global randomness
#            (common/crypto.hpp's random_bytes, the kernel CSPRNG for keys and nonces, is the
#            one source allowed).
#   storage  the receiver's storage path (receiver/storage): files, threads and clocks, but no
#            Asio, no sockets, and of the project only pure files, its own and mcdist_common's
#            (common/sys/: log sinks, xattrs, key files; no Asio either).
#
# mcdist_check_purity(PROFILE target...) checks each target twice:
# 1. At configure time: its link closure holds no Asio, Boost, shell or I/O library target.
# 2. At build time (cmake/scan_core_includes.cmake, rerun whenever one of the files changes):
#    every file of the target, headers included, is scanned for forbidden includes, for
#    quoted includes of project files outside what the profile allows, and (pure) for clock
#    reads and global randomness.
#
# A target's files: its SOURCES, and every .hpp/.cpp in the folders of its sources. So
# sender/core's header-only units are scanned without being listed, and a new file is checked
# strictly as soon as it is in the folder. A folder holds one layer (docs/architecture.md,
# "Layers"): a file of a checked target's folder that another target of the same CMakeLists
# lists fails the configure, because the scan could not tell which layer it is in.

function(_mcdist_link_closure target out)
  set(seen "")
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue t)
    if(t IN_LIST seen OR NOT TARGET ${t})
      continue()
    endif()
    list(APPEND seen ${t})
    get_target_property(libs ${t} LINK_LIBRARIES)
    get_target_property(ilibs ${t} INTERFACE_LINK_LIBRARIES)
    foreach(l IN LISTS libs ilibs)
      if(l AND NOT l MATCHES "-NOTFOUND$")
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" l "${l}")
        list(APPEND queue ${l})
      endif()
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# Absolute paths of the files of `target` (see above); fails on a folder holding two targets.
function(_mcdist_target_files target out)
  get_target_property(srcdir ${target} SOURCE_DIR)
  get_property(siblings DIRECTORY ${srcdir} PROPERTY BUILDSYSTEM_TARGETS)
  set(theirs "")
  set(owners "")
  foreach(other IN LISTS siblings)
    if(other STREQUAL target)
      continue()
    endif()
    get_target_property(osrcs ${other} SOURCES)
    foreach(s IN LISTS osrcs)
      cmake_path(ABSOLUTE_PATH s BASE_DIRECTORY ${srcdir} OUTPUT_VARIABLE a)
      list(APPEND theirs ${a})
      list(APPEND owners ${other})
    endforeach()
  endforeach()
  get_target_property(srcs ${target} SOURCES)
  set(files "")
  set(dirs "")
  foreach(s IN LISTS srcs)
    cmake_path(ABSOLUTE_PATH s BASE_DIRECTORY ${srcdir} OUTPUT_VARIABLE a)
    list(APPEND files ${a})
    cmake_path(GET a PARENT_PATH d)
    list(APPEND dirs ${d})
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  foreach(d IN LISTS dirs)
    file(GLOB in_dir CONFIGURE_DEPENDS ${d}/*.hpp ${d}/*.cpp)
    foreach(f IN LISTS in_dir)
      list(FIND theirs ${f} i)
      if(i GREATER_EQUAL 0)
        list(GET owners ${i} owner)
        message(FATAL_ERROR "${f} is listed by ${owner}, but its folder holds ${target}: one "
                            "folder, one layer (cmake/core_purity.cmake, docs/architecture.md "
                            "'Layers'). Move the file to a folder of its target's layer.")
      endif()
      list(APPEND files ${f})
    endforeach()
  endforeach()
  list(FILTER files INCLUDE REGEX "\\.(hpp|cpp|h)$")
  list(REMOVE_DUPLICATES files)
  list(SORT files)
  set(${out} ${files} PARENT_SCOPE)
endfunction()

# Project-relative paths ("common/wire.hpp") of `files`.
function(_mcdist_relative list_var out)
  set(rel "")
  foreach(f IN LISTS ${list_var})
    cmake_path(RELATIVE_PATH f BASE_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE r)
    list(APPEND rel ${r})
  endforeach()
  set(${out} ${rel} PARENT_SCOPE)
endfunction()

# Targets no pure or storage target may link (the closure check): Asio and Boost, the shells'
# libraries, and the I/O libraries behind them.
set(_mcdist_impure_link "^(mcdist_asio|Boost::.*|asio.*|mcdist_net|mcdist_http|mcdist_unicast|mcdist_sqlite|mcdist_wis2|mcdist_wis2_input|mcdist_sender_io|mcdist_receiver_io|mcdist_feed_lib|PkgConfig::USRSCTP|PkgConfig::SQLITE3|PkgConfig::MOSQUITTO|CURL::libcurl)$")

# mcdist_check_purity(pure|storage target...)
function(mcdist_check_purity profile)
  if(NOT profile MATCHES "^(pure|storage)$")
    message(FATAL_ERROR "mcdist_check_purity: profile must be pure or storage, not ${profile}")
  endif()
  foreach(t IN LISTS ARGN)
    _mcdist_link_closure(${t} closure)
    foreach(dep IN LISTS closure)
      set(bad FALSE)
      if(dep MATCHES "${_mcdist_impure_link}")
        set(bad TRUE)
      elseif(profile STREQUAL "pure" AND dep STREQUAL "mcdist_common")
        set(bad TRUE)  # the shells' log sinks, xattrs, key files
      endif()
      if(bad)
        message(FATAL_ERROR "${t} (${profile}) links ${dep}: see cmake/core_purity.cmake for what "
                            "a ${profile} layer may use (docs/architecture.md, 'Layers'). "
                            "Move the I/O into a shell target.")
      endif()
    endforeach()
    _mcdist_target_files(${t} files)
    set_property(GLOBAL APPEND PROPERTY MCDIST_PURITY_TARGETS ${t})
    set_property(GLOBAL PROPERTY MCDIST_PURITY_PROFILE_${t} ${profile})
    set_property(GLOBAL PROPERTY MCDIST_PURITY_FILES_${t} ${files})
    if(profile STREQUAL "pure")
      set_property(GLOBAL APPEND PROPERTY MCDIST_PURE_FILES ${files})
    endif()
  endforeach()
endfunction()

# Adds the build-time scans of every target given to mcdist_check_purity; call once, after it.
# `sys_target` is the no-Asio support layer (mcdist_common, common/sys/) that storage may
# include.
function(mcdist_add_purity_scans sys_target)
  get_property(targets GLOBAL PROPERTY MCDIST_PURITY_TARGETS)
  get_property(pure GLOBAL PROPERTY MCDIST_PURE_FILES)
  _mcdist_relative(pure pure_rel)
  get_target_property(sys_srcs ${sys_target} SOURCES)
  get_target_property(sys_dir ${sys_target} SOURCE_DIR)
  set(sys_rel "")
  foreach(s IN LISTS sys_srcs)
    cmake_path(ABSOLUTE_PATH s BASE_DIRECTORY ${sys_dir} OUTPUT_VARIABLE a)
    cmake_path(RELATIVE_PATH a BASE_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE r)
    list(APPEND sys_rel ${r})
  endforeach()
  set(dir ${CMAKE_BINARY_DIR}/purity)
  foreach(t IN LISTS targets)
    get_property(profile GLOBAL PROPERTY MCDIST_PURITY_PROFILE_${t})
    get_property(files GLOBAL PROPERTY MCDIST_PURITY_FILES_${t})
    _mcdist_relative(files own_rel)
    # Direction: common/ is below both programs, and the programs are beside each other. A
    # target may include pure files of common/ and of its own top folder (sender/ or
    # receiver/), never of a layer above it or beside it: a pure common file including
    # sender/core, or the receiver's core including the sender's, fails.
    list(GET own_rel 0 first_own)
    string(REGEX MATCH "^[^/]+" own_top "${first_own}")
    set(reachable "")
    foreach(p IN LISTS pure_rel)
      if(p MATCHES "^common/" OR p MATCHES "^${own_top}/")
        list(APPEND reachable ${p})
      endif()
    endforeach()
    set(allowed ${reachable} ${own_rel})
    if(profile STREQUAL "storage")
      list(APPEND allowed ${sys_rel})
    endif()
    list(REMOVE_DUPLICATES allowed)
    string(REPLACE ";" "\n" files_text "${files}")
    string(REPLACE ";" "\n" allowed_text "${allowed}")
    file(CONFIGURE OUTPUT ${dir}/${t}.files CONTENT "${files_text}\n")
    file(CONFIGURE OUTPUT ${dir}/${t}.allowed CONTENT "${allowed_text}\n")
    set(stamp ${dir}/${t}.stamp)
    add_custom_command(
      OUTPUT ${stamp}
      COMMAND ${CMAKE_COMMAND} -DFILES_LIST=${dir}/${t}.files -DALLOWED_LIST=${dir}/${t}.allowed
              -DPROFILE=${profile} -DTARGET=${t} -DSTAMP=${stamp}
              -P ${PROJECT_SOURCE_DIR}/cmake/scan_core_includes.cmake
      DEPENDS ${files} ${dir}/${t}.files ${dir}/${t}.allowed
              ${PROJECT_SOURCE_DIR}/cmake/scan_core_includes.cmake
      COMMENT "Checking that ${t} uses only what a ${profile} layer may")
    add_custom_target(${t}_purity DEPENDS ${stamp})
    add_dependencies(${t} ${t}_purity)
  endforeach()
endfunction()
