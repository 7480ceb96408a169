# Whether this build can run as several processes (dist/, data-parallel
# training), included by the top-level CMakeLists.txt: sets MELFORGE_WITH_MPI
# from the cache variable MELFORGE_MPI (AUTO, ON or OFF).
#   AUTO  ON when CMake finds an MPI library for C (Debian: libopenmpi-dev,
#         which tools/deps.sh installs); otherwise OFF, with a message that
#         says how to get it
#   ON    MPI is required (configuring fails without it)
#   OFF   one process only; MPI is not looked for
# Without MPI, melforge builds and trains in one process as before; launched by
# mpirun it refuses to start, naming the option.
string(TOUPPER "${MELFORGE_MPI}" _mf_mpi)
set(MELFORGE_WITH_MPI OFF)
if(_mf_mpi STREQUAL "OFF")
  message(STATUS "melforge: MELFORGE_MPI=OFF: one process only (no data-parallel training)")
elseif(_mf_mpi STREQUAL "ON" OR _mf_mpi STREQUAL "AUTO")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(MELFORGE_WITH_MPI ON)
    message(STATUS "melforge: MPI ${MPI_C_VERSION} (${MPI_C_LIB_NAMES}): data-parallel training across processes")
  elseif(_mf_mpi STREQUAL "ON")
    message(FATAL_ERROR "melforge: MELFORGE_MPI=ON but no MPI library for C was found: install libopenmpi-dev "
                        "(tools/deps.sh), or configure with -DMELFORGE_MPI=OFF")
  else()
    message(STATUS "melforge: no MPI library found: one process only (for data-parallel training install "
                   "libopenmpi-dev, e.g. tools/deps.sh, and configure a fresh build folder)")
  endif()
else()
  message(FATAL_ERROR "melforge: MELFORGE_MPI must be AUTO, ON or OFF, found '${MELFORGE_MPI}'")
endif()
