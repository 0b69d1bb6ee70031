# trainer/nn tests: norms, linear, RoPE, MLP against scalar loops of the spec's formulas. CPU only.
set(_dir ${CMAKE_CURRENT_LIST_DIR})
dflash_add_test(test_trainer_nn SOURCES ${_dir}/nn_layers_test.cc LIBS dflash_trainer LABELS cpu)
