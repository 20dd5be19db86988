# tc_add_ifunc(NAME SOURCES src... [TARGETS triple...] [DEPS lib...]
#              [OUTPUT_DIR dir] [FLAGS flag...])
#
# Compiles an ifunc with tc-cc into OUTPUT_DIR/NAME.tcfb (default: the current
# binary dir) and adds a target NAME_ifunc that builds it. tc-cc writes a
# depfile, so editing any header the sources include rebuilds the archive.
# TARGETS defaults to tc-cc's own (x86_64 and aarch64 Linux). DEPS are
# shared libraries the target must load (e.g. libm.so.6). The archive's path
# is in the target property TC_ARCHIVE.
#
# TC_IFUNC_FLAGS, when set, are tc-cc flags for every call in its scope
# (before FLAGS). Needs TC_CC_EXECUTABLE (set by find_package(TC) or by tc's
# own build).
function(tc_add_ifunc name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIR" "SOURCES;TARGETS;DEPS;FLAGS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "tc_add_ifunc(${name}): SOURCES is required")
  endif()
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  set(out "${ARG_OUTPUT_DIR}/${name}.tcfb")
  set(depfile "${CMAKE_CURRENT_BINARY_DIR}/${name}.tcfb.d")

  set(args --name=${name})
  foreach(t IN LISTS ARG_TARGETS)
    list(APPEND args --target=${t})
  endforeach()
  set(depends_on)
  if(ARG_DEPS)
    set(deps_file "${CMAKE_CURRENT_BINARY_DIR}/${name}.deps")
    list(JOIN ARG_DEPS "\n" deps_text)
    file(CONFIGURE OUTPUT "${deps_file}" CONTENT "${deps_text}\n")
    list(APPEND args --deps ${deps_file})
    list(APPEND depends_on "${deps_file}")
  endif()
  set(srcs)
  foreach(s IN LISTS ARG_SOURCES)
    get_filename_component(s "${s}" ABSOLUTE)
    list(APPEND srcs "${s}")
  endforeach()

  add_custom_command(
    OUTPUT "${out}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${ARG_OUTPUT_DIR}"
    COMMAND ${TC_CC_EXECUTABLE} ${args} ${TC_IFUNC_FLAGS} ${ARG_FLAGS} -MD -MF "${depfile}"
            -MT "${out}" ${srcs} -o "${out}"
    DEPENDS ${srcs} ${depends_on} ${TC_CC_EXECUTABLE}
    DEPFILE "${depfile}"
    COMMENT "tc-cc: building ifunc ${name}"
    VERBATIM)
  add_custom_target(${name}_ifunc ALL DEPENDS "${out}")
  set_target_properties(${name}_ifunc PROPERTIES TC_ARCHIVE "${out}")
endfunction()
