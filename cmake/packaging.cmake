# Install rules and the Debian package (CPack), included by the top-level
# CMakeLists.txt after every target exists.
#   cmake --install build --prefix P   P/bin/melforge, P/bin/melforge-bench,
#                                      P/share/doc/melforge (README, LICENSE, docs/),
#                                      P/share/melforge/examples (configurations),
#                                      P/share/melforge/bench (the PyTorch references)
#   cd build && cpack -G DEB           melforge_<version>_<arch>.deb (the program, docs,
#                                      examples) and melforge-bench_<version>_<arch>.deb
#                                      (the benchmarks, which link cuDNN), under /usr
# The installed programs find the CUDA runtime libraries where they were linked
# (their RUNPATH keeps the toolkit's library folder; the build tree is dropped).
# Each package's Depends are read from the built programs at packaging time
# (cmake/deb_depends.cmake.in): the Debian package that owns each shared library
# they load, and NVIDIA's package names for a toolkit installed outside dpkg.
include(GNUInstallDirs)

set_target_properties(melforge melforge-bench PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS melforge RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT melforge)
install(TARGETS melforge-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT bench)
install(FILES README.md LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT melforge)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs COMPONENT melforge)
install(DIRECTORY examples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/melforge/examples COMPONENT melforge)
# leakcnn_torch.py and cnn_stack_torch.py load exported models in PyTorch;
# melforge-bench's reader suite runs h5py_reader.py from here.
file(GLOB _mf_bench_python CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/*.py)
install(FILES ${_mf_bench_python} DESTINATION ${CMAKE_INSTALL_DATADIR}/melforge/bench COMPONENT melforge)

set(CPACK_PACKAGE_NAME melforge)
set(CPACK_PACKAGE_VENDOR "melforge")
set(CPACK_PACKAGE_CONTACT "melforge developers <melforge@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Trains CNNs on mel-spectrogram audio data with hand-written CUDA kernels (or the CPU)")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
# One package per component: melforge, and melforge-bench (which needs melforge's
# files and cuDNN, so a machine that only trains does not install cuDNN).
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL melforge bench)
set(CPACK_DEBIAN_MELFORGE_PACKAGE_NAME melforge)
set(CPACK_DEBIAN_BENCH_PACKAGE_NAME melforge-bench)
set(CPACK_DEBIAN_BENCH_DESCRIPTION "melforge-bench: melforge's microbenchmarks (against cuDNN and cuBLAS on a GPU)")
# Read by cpack before it packages: computes each package's Depends.
set(_mf_melforge_file "$<TARGET_FILE:melforge>")
set(_mf_bench_file "$<TARGET_FILE:melforge-bench>")
set(MELFORGE_CUDA_DEB_SUFFIX "${CUDAToolkit_VERSION_MAJOR}-${CUDAToolkit_VERSION_MINOR}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/deb_depends.cmake.in ${PROJECT_BINARY_DIR}/deb_depends.cmake.in @ONLY)
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/deb_depends.cmake INPUT ${PROJECT_BINARY_DIR}/deb_depends.cmake.in)
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_BINARY_DIR}/deb_depends.cmake)
include(CPack)
