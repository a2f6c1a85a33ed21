# DESIGN.md keeps the protocol cores pure: no sockets, no Asio, no clocks; STYLE.md keeps the
# storage path (receiver/storage) free of Asio too. Two checks enforce it on each target given.
#
# 1. At configure time: the link closure of each core target must not contain mcdist_asio or
#    any Boost/Asio target.
# 2. At build time: a custom command scans the core sources for Asio includes and fails the
#    build if it finds one; the core library depends on it, so it reruns whenever a core file
#    changes.

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

function(mcdist_check_core_purity)
  foreach(core IN LISTS ARGN)
    _mcdist_link_closure(${core} closure)
    foreach(dep IN LISTS closure)
      if(dep MATCHES "^(mcdist_asio|Boost::.*|asio.*)$")
        message(FATAL_ERROR "Protocol core ${core} links ${dep}: the cores must stay free of Asio "
                            "(DESIGN.md, 'a pure core in a thin shell'). Move the I/O into the shell.")
      endif()
    endforeach()
    get_target_property(srcs ${core} SOURCES)
    get_target_property(srcdir ${core} SOURCE_DIR)
    set(stamp ${CMAKE_CURRENT_BINARY_DIR}/${core}_purity.stamp)
    # The sources, and every header in the directories they live in (receiver/core/*.hpp, not
    # receiver/*.hpp: a core's SOURCE_DIR is its parent folder), header-only units included.
    set(abs_srcs "")
    set(src_dirs "")
    foreach(s IN LISTS srcs)
      cmake_path(ABSOLUTE_PATH s BASE_DIRECTORY ${srcdir} OUTPUT_VARIABLE a)
      list(APPEND abs_srcs ${a})
      cmake_path(GET a PARENT_PATH d)
      list(APPEND src_dirs ${d})
    endforeach()
    list(REMOVE_DUPLICATES src_dirs)
    foreach(d IN LISTS src_dirs)
      file(GLOB core_headers CONFIGURE_DEPENDS ${d}/*.hpp)
      list(APPEND abs_srcs ${core_headers})
    endforeach()
    add_custom_command(
      OUTPUT ${stamp}
      COMMAND ${CMAKE_COMMAND} -DFILES="${abs_srcs}" -DCORE=${core} -DSTAMP=${stamp}
              -P ${PROJECT_SOURCE_DIR}/cmake/scan_core_includes.cmake
      DEPENDS ${abs_srcs} ${PROJECT_SOURCE_DIR}/cmake/scan_core_includes.cmake
      COMMENT "Checking that ${core} includes no Asio")
    add_custom_target(${core}_purity DEPENDS ${stamp})
    add_dependencies(${core} ${core}_purity)
  endforeach()
endfunction()
