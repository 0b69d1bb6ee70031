# dflash-train as a process: --help, bad input (one line, exit 2), SIGINT saves a checkpoint (exit 130) and --resume
# finishes the run. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_cli SOURCES ${_dir}/train_cli_test.cc LIBS dflash_trainer LABELS cpu TIMEOUT 600)
target_compile_definitions(test_trainer_cli PRIVATE DFLASH_TRAIN_BIN="$<TARGET_FILE:dflash-train>")
add_dependencies(test_trainer_cli dflash-train)
