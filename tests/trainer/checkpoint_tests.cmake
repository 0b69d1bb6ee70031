# trainer/checkpoint tests: safetensors reading/writing (single and sharded, corrupt files), HF config parsing,
# tapped layers and the list of target tensors needed.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_checkpoint
  SOURCES ${_dir}/checkpoint_safetensors_test.cc ${_dir}/checkpoint_sharded_test.cc
          ${_dir}/checkpoint_corrupt_test.cc ${_dir}/checkpoint_config_test.cc
          ${_dir}/checkpoint_target_tensors_test.cc
  LIBS dflash_trainer_core
  LABELS cpu)
