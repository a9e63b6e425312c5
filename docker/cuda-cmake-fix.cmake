# CMake 3.25.1 (Debian 12) marks CUDA::nvToolsExt deprecated without checking
# that it exists, and CUDA 12.9+ no longer ships that library: configuring
# fails in FindCUDAToolkit. 3.25.2 fixed it; an empty stand-in target makes
# older ones pass. Loaded with -DCMAKE_PROJECT_TOP_LEVEL_INCLUDES.
if(CMAKE_VERSION VERSION_LESS 3.25.2 AND NOT TARGET CUDA::nvToolsExt)
  add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
endif()
