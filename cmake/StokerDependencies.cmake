# Finds every third-party package once, so the folders below only link targets.

find_package(Torch REQUIRED)
# Torch's config appends its ABI flag to CMAKE_CXX_FLAGS users are told to copy;
# attach it to an interface target instead so only torch users get it.
add_library(stoker_torch INTERFACE)
target_link_libraries(stoker_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(stoker_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
separate_arguments(_stoker_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(stoker_torch INTERFACE ${_stoker_torch_flags})

# CUDA code is compiled only when the libtorch found was built with CUDA
# (PyTorch's bundled libtorch on a GPU machine); Debian's libtorch is CPU-only.
set(STOKER_WITH_CUDA OFF)
if(TARGET torch_cuda OR CAFFE2_USE_CUDA OR TORCH_CUDA_LIBRARIES)
  set(STOKER_WITH_CUDA ON)
  target_compile_definitions(stoker_torch INTERFACE STOKER_WITH_CUDA=1)
endif()
message(STATUS "Stoker: libtorch ${Torch_VERSION} CUDA=${STOKER_WITH_CUDA}")

find_package(nlohmann_json 3.9 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(XXHASH_LIBRARY NAMES xxhash REQUIRED)
add_library(stoker_xxhash INTERFACE)
target_include_directories(stoker_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_link_libraries(stoker_xxhash INTERFACE ${XXHASH_LIBRARY})

if(STOKER_TESTS OR STOKER_GUI)
  set(_qt_components Core Test)
  if(STOKER_GUI)
    list(APPEND _qt_components Gui Widgets PrintSupport)  # PrintSupport: QCustomPlot links it
  endif()
  find_package(Qt6 6.2 REQUIRED COMPONENTS ${_qt_components})
endif()
if(STOKER_GUI)
  find_package(QCustomPlotQt6 REQUIRED)
endif()

find_package(Threads REQUIRED)
