# trainer_core's dependency rule: its sources reach no header of cache/, tuner/, kernels/, the LibTorch parts of the
# trainer, SQLite or Boost (core_dependencies.cmake). CPU only, a few seconds.
add_test(NAME trainer_core_dependencies
  COMMAND ${CMAKE_COMMAND} -DCXX=${CMAKE_CXX_COMPILER} -DROOT=${PROJECT_SOURCE_DIR}
          "-DSOURCES=$<JOIN:$<TARGET_PROPERTY:dflash_trainer_core,SOURCES>,|>"
          "-DINCLUDES=$<JOIN:$<TARGET_PROPERTY:dflash_trainer_core,INCLUDE_DIRECTORIES>,|>"
          "-DDEFINES=$<JOIN:$<TARGET_PROPERTY:dflash_trainer_core,COMPILE_DEFINITIONS>,|>"
          -P ${CMAKE_CURRENT_LIST_DIR}/core_dependencies.cmake)
set_tests_properties(trainer_core_dependencies PROPERTIES LABELS cpu TIMEOUT 120)
