# dflash_embed_sources(<target> SYMBOL <c-identifier> FILES <files...>)
# Embeds the given files (kernel .cu/.cuh sources) into <target> as a table of dflash::EmbeddedFile
# (see tuner/embedded_file.h), regenerated whenever a source changes, so nothing is read from disk at run time.
# Each file is embedded under its base name, as the kernel sources #include it, also a file of another folder
# (a family's list names the kernels/common/ headers it includes as ../common/<name>): two files of one table
# with the same base name are a configure error.
set(DFLASH_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_one.cmake)

function(dflash_embed_sources target)
  cmake_parse_arguments(ARG "" "SYMBOL" "FILES" ${ARGN})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${ARG_SYMBOL}_embedded.cc)
  set(abs_files)
  set(base_names)
  foreach(f ${ARG_FILES})
    get_filename_component(a ${f} ABSOLUTE)
    get_filename_component(n ${f} NAME)
    if(n IN_LIST base_names)
      message(FATAL_ERROR "dflash_embed_sources(${ARG_SYMBOL}): two files named ${n}")
    endif()
    list(APPEND base_names ${n})
    list(APPEND abs_files ${a})
  endforeach()
  string(REPLACE ";" "|" joined "${abs_files}")
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DSYMBOL=${ARG_SYMBOL} "-DFILES=${joined}" -P ${DFLASH_EMBED_SCRIPT}
    DEPENDS ${abs_files} ${DFLASH_EMBED_SCRIPT}
    COMMENT "Embedding kernel sources into ${ARG_SYMBOL}"
    VERBATIM)
  # The target may live in another directory (kernels/<family>/ adds to dflash_kernels of kernels/): a local
  # target drives the custom command, the target waits on it, and the generated file is marked GENERATED in the
  # target's directory too.
  add_custom_target(${ARG_SYMBOL}_embed DEPENDS ${out})
  add_dependencies(${target} ${ARG_SYMBOL}_embed)
  set_source_files_properties(${out} TARGET_DIRECTORY ${target} PROPERTIES GENERATED TRUE)
  target_sources(${target} PRIVATE ${out})
endfunction()
