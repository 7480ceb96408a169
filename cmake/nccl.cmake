# NCCL for the GPU ranks of a data-parallel job (dist/nccl_collectives.cpp),
# included by the top-level CMakeLists.txt after cuda_backend and mpi: sets
# MELFORGE_WITH_NCCL from the cache variable MELFORGE_NCCL (AUTO, ON or OFF).
#   AUTO  ON when the CUDA backend is built for real GPUs (not the emulator),
#         MPI is built (it starts the job and hands NCCL its id), and nccl.h
#         is found (the CUDA 13 toolkit ships it; Debian's libnccl-dev too).
#         libnccl itself is not linked: a job loads it when it first needs it.
#   ON    NCCL is required
#   OFF   GPU ranks exchange their gradients through host memory over MPI
# Without NCCL, GPU ranks still train, with the host-staged MPI exchange.
string(TOUPPER "${MELFORGE_NCCL}" _mf_nccl)
set(MELFORGE_WITH_NCCL OFF)
if(NOT _mf_nccl MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "melforge: MELFORGE_NCCL must be AUTO, ON or OFF, found '${MELFORGE_NCCL}'")
endif()
if(NOT _mf_nccl STREQUAL "OFF")
  set(_mf_nccl_why "")
  if(NOT MELFORGE_WITH_CUDA OR MELFORGE_CUDA_EMU)
    set(_mf_nccl_why "the CUDA backend is not built for real GPUs")
  elseif(NOT MELFORGE_WITH_MPI)
    set(_mf_nccl_why "MPI is not built (it starts the job and hands NCCL its id)")
  else()
    find_package(CUDAToolkit QUIET)
    set(_mf_cuda_roots "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}" /usr/local/cuda)
    find_path(MELFORGE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include
              PATHS ${_mf_cuda_roots})
    # Where the toolkit keeps libnccl, tried at run time when the loader's
    # own search (LD_LIBRARY_PATH, ldconfig) does not find it.
    find_library(MELFORGE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64
                 PATHS ${_mf_cuda_roots})
    if(MELFORGE_NCCL_INCLUDE_DIR)
      set(MELFORGE_WITH_NCCL ON)
      message(STATUS "melforge: NCCL (${MELFORGE_NCCL_INCLUDE_DIR}/nccl.h; libnccl loaded at run time): GPU ranks "
                     "exchange gradients over NCCL")
    else()
      set(_mf_nccl_why "nccl.h was not found")
    endif()
  endif()
  if(NOT MELFORGE_WITH_NCCL)
    if(_mf_nccl STREQUAL "ON")
      message(FATAL_ERROR "melforge: MELFORGE_NCCL=ON but ${_mf_nccl_why}")
    endif()
    message(STATUS "melforge: no NCCL (${_mf_nccl_why}): GPU ranks exchange gradients through host memory over MPI")
  endif()
endif()
