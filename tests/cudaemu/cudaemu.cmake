# The emulated build (MELFORGE_CUDA_EMU=ON), included by the top-level
# CMakeLists.txt in place of NVIDIA's toolchain: no CUDA language, every .cu
# compiled as host C++ against melforge's CPU emulator of CUDA, which stands in
# for libcudart and libcublasLt. For tests only (docs/testing.md, "Testing
# CUDA code without a GPU"). Expects melforge_cudart, melforge_cublas, melforge_warnings,
# CUDAToolkit (its headers) and Threads from the top level.

find_package(Python3 REQUIRED COMPONENTS Interpreter)

# The runtime API, the block executor, cuBLASLt's matmul and cuFFT's R2C transform.
add_library(melforge_cudaemu STATIC
  ${CMAKE_CURRENT_LIST_DIR}/emu_core.cpp ${CMAKE_CURRENT_LIST_DIR}/emu_runtime.cpp
  ${CMAKE_CURRENT_LIST_DIR}/emu_cublaslt.cpp ${CMAKE_CURRENT_LIST_DIR}/emu_async.cpp
  ${CMAKE_CURRENT_LIST_DIR}/emu_cufft.cpp)
# The toolkit's headers as system headers, as CUDA::cudart gives them to the
# real build: host C++ that is not a kernel then preprocesses to the same text
# in both builds, and ccache compiles it once for both (tools/test.sh).
target_include_directories(melforge_cudaemu PUBLIC ${PROJECT_SOURCE_DIR})
target_include_directories(melforge_cudaemu SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(melforge_cudaemu PUBLIC Threads::Threads PRIVATE melforge_warnings)

target_link_libraries(melforge_cudart INTERFACE melforge_cudaemu)
target_link_libraries(melforge_cublas INTERFACE melforge_cudaemu)
target_link_libraries(melforge_cufft INTERFACE melforge_cudaemu)
# Seen by the tests only (tests/support/testing.hpp scales the largest shapes
# down); the kernels and the libraries never test it.
add_compile_definitions(MELFORGE_CUDA_EMU=1)

# melforge_cuda_sources(TARGET): replaces TARGET's .cu sources by host C++
# rewrites of them (rewrite_cu.py: launches, extern __shared__), each compiled
# with prelude.hpp force-included and include/ first on the quote-include
# path, where the emulator's kernels/mma_ptx.cuh stands in for the inline PTX.
# Call it from the directory that made TARGET.
function(melforge_cuda_sources target)
  set(emu_dir ${PROJECT_SOURCE_DIR}/tests/cudaemu)
  get_target_property(srcs ${target} SOURCES)
  set(out_srcs)
  foreach(src IN LISTS srcs)
    if(src MATCHES "\\.cu$")
      get_filename_component(abs ${src} ABSOLUTE)
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${abs})
      set(gen ${PROJECT_BINARY_DIR}/cudaemu/${rel}.cpp)
      add_custom_command(OUTPUT ${gen}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/cudaemu
        COMMAND Python3::Interpreter ${emu_dir}/rewrite_cu.py ${abs} ${gen}
        DEPENDS ${abs} ${emu_dir}/rewrite_cu.py
        COMMENT "cudaemu: ${rel}")
      set_source_files_properties(${gen} PROPERTIES COMPILE_OPTIONS
        "-include;${emu_dir}/prelude.hpp;-iquote;${emu_dir}/include;-fno-strict-aliasing;-Wno-unknown-pragmas;-Wno-sign-compare;-Wno-unused-variable;-Wno-unused-but-set-variable")
      list(APPEND out_srcs ${gen})
    else()
      list(APPEND out_srcs ${src})
    endif()
  endforeach()
  set_property(TARGET ${target} PROPERTY SOURCES ${out_srcs})
  target_include_directories(${target} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
endfunction()
