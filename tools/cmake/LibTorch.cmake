# LibTorch for the trainer, taken from a torch wheel's package directory (site-packages/torch): its C++ headers and
# shared libraries are all we use. Defines the imported target dflash::torch.
#   DFLASH_TORCH_DIR   the torch package directory; default: the CPU copy tools/scripts/install-deps.sh installs
#                      under ~/.cache/dflash-tune (or $DFLASH_TORCH_HOME), else a python3 that can import torch.
#   DFLASH_TORCH_CUDA  link torch's CUDA backend too (the GPU machine's wheel with its nvidia-* libraries).
# The Python package's build (DFLASH_PYTHON_EXTENSION) takes the torch of the Python running it instead, found
# through torch.utils.cmake_prefix_path, and links its CUDA backend whenever that torch has one.
set(DFLASH_TORCH_VERSION 2.11.0)
set(DFLASH_TORCH_DIR "" CACHE PATH "torch package directory (site-packages/torch) whose LibTorch the trainer uses")
option(DFLASH_TORCH_CUDA "Link LibTorch's CUDA backend (libtorch_cuda, libc10_cuda)" OFF)

if(DFLASH_PYTHON_EXTENSION)
  find_package(Python 3.9 REQUIRED COMPONENTS Interpreter)
  execute_process(COMMAND "${Python_EXECUTABLE}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE torch_rc ERROR_QUIET)
  if(NOT torch_rc EQUAL 0)
    message(FATAL_ERROR "dflash_tune needs torch==${DFLASH_TORCH_VERSION} installed in the Python that builds it "
                        "(${Python_EXECUTABLE} cannot import torch); install torch first, then build with "
                        "pip install --no-build-isolation")
  endif()
  get_filename_component(torch_found "${torch_prefix}/../.." ABSOLUTE)  # site-packages/torch/share/cmake
  set(DFLASH_TORCH_DIR "${torch_found}" CACHE PATH "" FORCE)
  if(EXISTS "${DFLASH_TORCH_DIR}/lib/libtorch_cuda.so")
    set(DFLASH_TORCH_CUDA ON CACHE BOOL "" FORCE)
  endif()
elseif(NOT DFLASH_TORCH_DIR)
  set(torch_home "$ENV{DFLASH_TORCH_HOME}")
  if(NOT torch_home)
    set(torch_home "$ENV{HOME}/.cache/dflash-tune/torch-${DFLASH_TORCH_VERSION}")
  endif()
  file(GLOB torch_candidates "${torch_home}/lib/python3*/site-packages/torch")
  if(torch_candidates)
    list(GET torch_candidates 0 torch_found)
    set(DFLASH_TORCH_DIR "${torch_found}" CACHE PATH "" FORCE)
  endif()
endif()

set(torch_lib "${DFLASH_TORCH_DIR}/lib")
set(torch_version_header "${DFLASH_TORCH_DIR}/include/torch/headeronly/version.h")
if(NOT DFLASH_TORCH_DIR OR NOT EXISTS "${torch_lib}/libtorch_cpu.so" OR NOT EXISTS "${torch_version_header}")
  message(FATAL_ERROR "LibTorch not found (DFLASH_TORCH_DIR='${DFLASH_TORCH_DIR}'). Run tools/scripts/install-deps.sh "
                      "(installs torch==${DFLASH_TORCH_VERSION} under ~/.cache/dflash-tune), pass "
                      "-DDFLASH_TORCH_DIR=<site-packages>/torch, or -DDFLASH_WITH_TORCH=OFF to build without the trainer.")
endif()
set(torch_version "")
foreach(part MAJOR MINOR PATCH)
  file(STRINGS "${torch_version_header}" line REGEX "#define TORCH_VERSION_${part} [0-9]+")
  string(REGEX MATCH "[0-9]+$" number "${line}")
  list(APPEND torch_version "${number}")
endforeach()
list(JOIN torch_version "." torch_version)
if(NOT torch_version VERSION_EQUAL DFLASH_TORCH_VERSION)
  message(FATAL_ERROR "LibTorch at ${DFLASH_TORCH_DIR} is ${torch_version}; dflash-train is pinned to "
                      "${DFLASH_TORCH_VERSION} (the GPU machine's version)")
endif()

add_library(dflash_torch INTERFACE)
add_library(dflash::torch ALIAS dflash_torch)
target_include_directories(dflash_torch SYSTEM INTERFACE "${DFLASH_TORCH_DIR}/include"
                                                         "${DFLASH_TORCH_DIR}/include/torch/csrc/api/include")
target_link_libraries(dflash_torch INTERFACE "${torch_lib}/libtorch_cpu.so" "${torch_lib}/libc10.so")
if(DFLASH_TORCH_CUDA)
  # The CUDA backend registers itself from static initialisers: keep it linked although no symbol is referenced.
  target_link_libraries(dflash_torch INTERFACE -Wl,--no-as-needed "${torch_lib}/libtorch_cuda.so"
                                               "${torch_lib}/libc10_cuda.so" -Wl,--as-needed)
  target_compile_definitions(dflash_torch INTERFACE DFLASH_TORCH_CUDA=1)
endif()
target_link_options(dflash_torch INTERFACE "-Wl,-rpath,${torch_lib}")
message(STATUS "LibTorch ${torch_version} from ${DFLASH_TORCH_DIR} (CUDA backend: ${DFLASH_TORCH_CUDA})")

# c10d backends for data-parallel training (trainer/dist/backend.cc). Their library code is inside LibTorch; the
# headers they include are not shipped with the wheel: gloo's come from Debian's libgloo-dev, nccl.h from the CUDA
# toolkit, /usr/local/include or the wheel's nvidia-nccl package. Without them that backend is reported as missing
# at run time (single-process training is unaffected).
find_path(DFLASH_GLOO_INCLUDE_DIR gloo/algorithm.h DOC "gloo headers (libgloo-dev) for the CPU c10d backend")
if(DFLASH_TORCH_CUDA)
  file(GLOB nccl_hints "${DFLASH_TORCH_DIR}/../nvidia/*/include" "${DFLASH_TORCH_DIR}/../nvidia/*/*/include")
  find_path(DFLASH_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${nccl_hints} /usr/local/include
            DOC "nccl.h for the NCCL c10d backend")
else()
  unset(DFLASH_NCCL_INCLUDE_DIR CACHE)  # a later CUDA configure of this build folder searches afresh
  set(DFLASH_NCCL_INCLUDE_DIR "")
endif()
message(STATUS "c10d backends: gloo headers '${DFLASH_GLOO_INCLUDE_DIR}', nccl.h '${DFLASH_NCCL_INCLUDE_DIR}'")
