# Included by archive-format/CMakeLists.txt. The zstd dictionary members are compressed with (docs/archive-format.md,
# "The dictionary"): the bitcode LLVM 22's writer makes of two small prepared
# ifunc modules, one per triple tc-cc targets by default, concatenated.
#
# It is made at build time from the checked-in .ll files with the BUILD
# HOST's llvm-as, never with a tool of the target: a cross build (scripts/
# build-aarch64.sh) finds LLVM's cmake files in its arm64 sysroot, but runs
# the same /usr/lib/llvm-22/bin/llvm-as as the native build, so both embed
# the same bytes. The dictionary's id is a hash of its bytes (tc-ar --version
# prints it), so two builds that disagree say so instead of misreading.
find_program(TC_HOST_LLVM_AS NAMES llvm-as
  PATHS /usr/lib/llvm-${LLVM_VERSION_MAJOR}/bin
  NO_DEFAULT_PATH NO_CMAKE_FIND_ROOT_PATH
  DOC "The build host's llvm-as ${LLVM_VERSION_MAJOR}, which makes the zstd dictionary")
if(NOT TC_HOST_LLVM_AS)
  message(FATAL_ERROR "no host llvm-as in /usr/lib/llvm-${LLVM_VERSION_MAJOR}/bin "
                      "(install llvm-${LLVM_VERSION_MAJOR}); set TC_HOST_LLVM_AS")
endif()

set(dict_parts x86_64 aarch64)
set(dict_bitcode)
foreach(part ${dict_parts})
  set(ll ${CMAKE_CURRENT_SOURCE_DIR}/dict/tc_dict.${part}.ll)
  set(bc ${CMAKE_CURRENT_BINARY_DIR}/tc_dict.${part}.bc)
  add_custom_command(OUTPUT ${bc}
    COMMAND ${TC_HOST_LLVM_AS} ${ll} -o ${bc}
    DEPENDS ${ll}
    COMMENT "Assembling the zstd dictionary's ${part} part")
  list(APPEND dict_bitcode ${bc})
endforeach()

string(REPLACE ";" "," dict_inputs "${dict_bitcode}")
add_custom_command(
  OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/Dictionary.inc
         ${CMAKE_CURRENT_BINARY_DIR}/DictionaryParts.inc
  COMMAND ${CMAKE_COMMAND} -DOUT=${CMAKE_CURRENT_BINARY_DIR}/Dictionary.inc
          -DPARTS=${CMAKE_CURRENT_BINARY_DIR}/DictionaryParts.inc
          -DINPUTS=${dict_inputs} -P ${CMAKE_CURRENT_SOURCE_DIR}/dict/Embed.cmake
  DEPENDS ${dict_bitcode} ${CMAKE_CURRENT_SOURCE_DIR}/dict/Embed.cmake
  COMMENT "Embedding the zstd dictionary")
set(TC_DICTIONARY_INC ${CMAKE_CURRENT_BINARY_DIR}/Dictionary.inc
  ${CMAKE_CURRENT_BINARY_DIR}/DictionaryParts.inc)
