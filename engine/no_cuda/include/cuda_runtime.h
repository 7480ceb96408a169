// The CPU-only build's stand-in for <cuda_runtime.h>: the runtime API of
// cuda_runtime_api.h here (engine/no_cuda/README.md).
#pragma once

#include <cuda_runtime_api.h>
