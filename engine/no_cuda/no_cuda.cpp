// The CPU-only build's CUDA runtime (include/cuda_runtime_api.h, engine/no_cuda/README.md):
// a machine with no GPU. The device count is 0, every call that needs a device
// returns cudaErrorNoDevice and changes nothing, the error queries return
// cudaSuccess. Nothing reaches these calls on the CPU backend's paths;
// engine/device.cpp says why there is no GPU before any is asked for.
#include <cuda_runtime_api.h>

namespace {
constexpr cudaError_t kNone = cudaErrorNoDevice;
}

extern "C" {

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorDevicesUnavailable: return "cudaErrorDevicesUnavailable";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorNotReady: return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  if (error == cudaSuccess) return "no error";
  if (error == cudaErrorNoDevice) return "melforge was built without CUDA: the CPU backend only";
  return "unknown error (melforge was built without CUDA)";
}

cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 0;
  return kNone;
}
cudaError_t cudaSetDevice(int) { return kNone; }
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp*, int) { return kNone; }
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int) { return kNone; }
cudaError_t cudaDeviceGetPCIBusId(char*, int, int) { return kNone; }
cudaError_t cudaDeviceSynchronize() { return kNone; }
cudaError_t cudaMemGetInfo(std::size_t*, std::size_t*) { return kNone; }

cudaError_t cudaMallocAsync(void** ptr, std::size_t, cudaStream_t) {
  *ptr = nullptr;
  return kNone;
}
cudaError_t cudaFreeAsync(void*, cudaStream_t) { return kNone; }
cudaError_t cudaHostAlloc(void** ptr, std::size_t, unsigned int) {
  *ptr = nullptr;
  return kNone;
}
cudaError_t cudaFreeHost(void*) { return kNone; }
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t*, int) { return kNone; }
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return kNone; }
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) { return kNone; }
cudaError_t cudaMemcpyAsync(void*, const void*, std::size_t, cudaMemcpyKind, cudaStream_t) { return kNone; }
cudaError_t cudaMemsetAsync(void*, int, std::size_t, cudaStream_t) { return kNone; }

cudaError_t cudaStreamCreateWithPriority(cudaStream_t*, unsigned int, int) { return kNone; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return kNone; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return kNone; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return kNone; }
cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return kNone;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) { return kNone; }
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t*) { return kNone; }
cudaError_t cudaGraphInstantiate(cudaGraphExec_t*, cudaGraph_t, unsigned long long) { return kNone; }
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return kNone; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return kNone; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return kNone; }

cudaError_t cudaEventCreate(cudaEvent_t*) { return kNone; }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t*, unsigned int) { return kNone; }
cudaError_t cudaEventDestroy(cudaEvent_t) { return kNone; }
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return kNone; }
cudaError_t cudaEventQuery(cudaEvent_t) { return kNone; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return kNone; }
cudaError_t cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t) { return kNone; }

cudaError_t cudaProfilerStart() { return kNone; }
cudaError_t cudaProfilerStop() { return kNone; }
}
