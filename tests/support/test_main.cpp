// doctest's main for melforge suites. GPU suites (MELFORGE_GPU_TEST) exit 77
// when no GPU is usable, which ctest reports as "skipped" (SKIP_RETURN_CODE),
// never as "passed".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "engine/device.hpp"

int main(int argc, char** argv) {
#ifdef MELFORGE_GPU_TEST
  if (!mf::gpu_available()) {
    std::printf("SKIPPED: no usable GPU (%s)\n", mf::gpu_info().why_none.c_str());
    return 77;
  }
#endif
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
