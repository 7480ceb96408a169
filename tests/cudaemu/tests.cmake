# The emulator's own tests, included by tests/CMakeLists.txt in the emulated
# build. Labels gpu and emu, so `ctest -L gpu` there runs them with the GPU
# suites: mma.sync fragments, ldmatrix and cp.async, cuBLASLt and cuFFT semantics, the
# dynamic shared memory opt-in and occupancy, and that the emulator catches
# what it is there to catch (divergent barriers, races exposed by the thread
# order, illegal calls during a capture, copies in the wrong direction,
# misaligned or partial-warp ldmatrix, reads of a cp.async destination too early).
add_executable(test_cudaemu ${PROJECT_SOURCE_DIR}/tests/cudaemu/test_emu_mma.cpp
  ${PROJECT_SOURCE_DIR}/tests/cudaemu/test_emu_cublaslt.cpp ${PROJECT_SOURCE_DIR}/tests/cudaemu/test_emu_cufft.cpp
  ${PROJECT_SOURCE_DIR}/tests/cudaemu/test_emu_core.cu
  ${PROJECT_SOURCE_DIR}/tests/cudaemu/test_emu_async.cu)
melforge_cuda_sources(test_cudaemu)
target_link_libraries(test_cudaemu PRIVATE melforge_test_main_cpu melforge_cudaemu melforge_engine doctest::doctest
  melforge_warnings)
add_test(NAME test_cudaemu COMMAND test_cudaemu)
set_tests_properties(test_cudaemu PROPERTIES LABELS "gpu;emu")
add_dependencies(melforge_gpu_tests test_cudaemu)
