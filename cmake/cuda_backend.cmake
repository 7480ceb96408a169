# Whether this build has the CUDA backend, included by the top-level
# CMakeLists.txt after project(): sets MELFORGE_WITH_CUDA from the cache
# variable MELFORGE_CUDA (AUTO, ON or OFF) and, without CUDA, defines
# MELFORGE_NO_CUDA=1 for every file (engine/cuda_entry.hpp, engine/no_cuda/README.md).
#   AUTO  ON when CMake finds nvcc (PATH, CUDACXX or -DCMAKE_CUDA_COMPILER) and
#         the CUDA toolkit 12.0 or newer; otherwise OFF, with a warning that
#         says how to get the GPU build
#   ON    the toolkit is required (configuring fails without it)
#   OFF   the CPU backend alone; the toolkit is not looked for
# The emulated build (MELFORGE_CUDA_EMU) compiles the CUDA code against the
# toolkit's headers, so it counts as ON.

set(_mf_cuda_hint "for the GPU build, install the CUDA toolkit (12.0 or newer), put nvcc on PATH "
                  "(e.g. export PATH=$PATH:/usr/local/cuda/bin) and configure a fresh build folder")
string(TOUPPER "${MELFORGE_CUDA}" _mf_cuda)
if(MELFORGE_CUDA_EMU)
  if(_mf_cuda STREQUAL "OFF")
    message(FATAL_ERROR "melforge: MELFORGE_CUDA_EMU=ON emulates the CUDA backend, which MELFORGE_CUDA=OFF leaves "
                        "out; drop one of them")
  endif()
  set(MELFORGE_WITH_CUDA ON)
elseif(_mf_cuda STREQUAL "OFF")
  set(MELFORGE_WITH_CUDA OFF)
  message(STATUS "melforge: MELFORGE_CUDA=OFF: building without CUDA, the CPU backend only")
elseif(_mf_cuda STREQUAL "ON" OR _mf_cuda STREQUAL "AUTO")
  include(CheckLanguage)
  check_language(CUDA)
  set(_mf_cuda_found OFF)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit 12.0 QUIET)
    if(CUDAToolkit_FOUND)
      set(_mf_cuda_found ON)
    else()
      set(_mf_cuda_missing "nvcc (${CMAKE_CUDA_COMPILER}) but no CUDA toolkit 12.0 or newer")
    endif()
  else()
    set(_mf_cuda_missing "no CUDA compiler (nvcc is not on PATH; CUDACXX and CMAKE_CUDA_COMPILER are not set)")
  endif()
  if(_mf_cuda_found)
    set(MELFORGE_WITH_CUDA ON)
  elseif(_mf_cuda STREQUAL "ON")
    message(FATAL_ERROR "melforge: MELFORGE_CUDA=ON but CMake found ${_mf_cuda_missing}; "
                        ${_mf_cuda_hint} ", or configure with -DMELFORGE_CUDA=OFF for the CPU backend alone")
  else()
    set(MELFORGE_WITH_CUDA OFF)
    message(WARNING "melforge: CMake found ${_mf_cuda_missing}: building without CUDA, the CPU backend only "
                    "(no GPU suites, no melforge-bench); " ${_mf_cuda_hint} " (-DMELFORGE_CUDA=ON makes "
                    "a missing toolkit an error; -DMELFORGE_CUDA=OFF silences this warning).")
  endif()
else()
  message(FATAL_ERROR "melforge: MELFORGE_CUDA must be AUTO, ON or OFF, found '${MELFORGE_CUDA}'")
endif()

if(NOT MELFORGE_WITH_CUDA)
  add_compile_definitions(MELFORGE_NO_CUDA=1)
endif()
