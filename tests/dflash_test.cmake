# dflash_add_test(<name> SOURCES <files...> LIBS <libs...> LABELS <resource> <speed> [TIMEOUT <s>])
# One GoogleTest executable; each of its tests is a CTest test carrying two labels:
#   resource: cpu (plain CPU), jit (NVRTC compiles, no GPU), runtime (the CUDA driver API; runs without a GPU),
#             gpu (needs a GPU; every test skips with its reason without one);
#   speed:    fast (the suite takes seconds on the CI machine's 2 cores) or slow (a minute or more).
# The fast set: `ctest -L fast` (or `-LE slow`); one resource: `ctest -L gpu`.
# DFLASH_TEST_TIMEOUT_CAP (seconds, 0 = none) caps every test's TIMEOUT (default 600 s a test), e.g. on the GPU
# machine for kernels that have never run (tools/device/gpu_run.sh --test-timeout).
set(DFLASH_TEST_TIMEOUT_CAP 0 CACHE STRING "upper bound on every test's TIMEOUT in seconds (0: none)")
set(DFLASH_TEST_RESOURCES cpu jit runtime gpu)
set(DFLASH_TEST_SPEEDS fast slow)

function(dflash_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  list(LENGTH ARG_LABELS n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "dflash_add_test(${name}): LABELS <resource> <speed>, got '${ARG_LABELS}'")
  endif()
  list(GET ARG_LABELS 0 resource)
  list(GET ARG_LABELS 1 speed)
  if(NOT resource IN_LIST DFLASH_TEST_RESOURCES OR NOT speed IN_LIST DFLASH_TEST_SPEEDS)
    message(FATAL_ERROR "dflash_add_test(${name}): LABELS must be one of (${DFLASH_TEST_RESOURCES}) and one of "
                        "(${DFLASH_TEST_SPEEDS}), got '${ARG_LABELS}'")
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main dflash_warnings)
  # LibTorch tests reuse the trainer's precompiled torch/torch.h (83 s -> 30 s a test file on 2 cores).
  if("dflash_trainer" IN_LIST ARG_LIBS)
    target_precompile_headers(${name} REUSE_FROM dflash_trainer)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  if(DFLASH_TEST_TIMEOUT_CAP GREATER 0 AND ARG_TIMEOUT GREATER DFLASH_TEST_TIMEOUT_CAP)
    set(ARG_TIMEOUT ${DFLASH_TEST_TIMEOUT_CAP})
  endif()
  gtest_discover_tests(${name} TEST_LIST ${name}_tests PROPERTIES TIMEOUT ${ARG_TIMEOUT} DISCOVERY_TIMEOUT 60)
  # gtest_discover_tests (CMake < 3.28) flattens list-valued PROPERTIES, so both labels are set by a script CTest
  # runs after the discovered tests are defined (TEST_INCLUDE_FILES run in the order they were added).
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
  file(WRITE ${labels_file} "if(${name}_tests)\n  set_tests_properties(\${${name}_tests} PROPERTIES LABELS \"${resource};${speed}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()
