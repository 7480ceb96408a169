// The CPU-only build's stand-in for <cuda_profiler_api.h>: cudaProfilerStart
// and cudaProfilerStop are in cuda_runtime_api.h here (engine/no_cuda/README.md).
#pragma once

#include <cuda_runtime_api.h>
