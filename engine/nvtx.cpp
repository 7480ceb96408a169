#include "engine/nvtx.hpp"

#ifdef MELFORGE_NO_CUDA  // the CPU-only build: no NVTX, nothing to mark
namespace mf {
NvtxRange::NvtxRange(const char*) {}
NvtxRange::~NvtxRange() {}
void nvtx_name_stream(cudaStream_t, const char*) {}
void nvtx_mark(const char*) {}
}  // namespace mf
#else
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtCudaRt.h>

namespace mf {

namespace {
struct MelforgeDomain {
  static constexpr const char* name = "melforge";
};
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA(MelforgeDomain::name);
  return d;
}
}  // namespace

NvtxRange::NvtxRange(const char* name) {
  nvtxEventAttributes_t attr{};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = name;
  nvtxDomainRangePushEx(domain(), &attr);
}

NvtxRange::~NvtxRange() { nvtxDomainRangePop(domain()); }

void nvtx_name_stream(cudaStream_t stream, const char* name) { nvtxNameCudaStreamA(stream, name); }

void nvtx_mark(const char* message) {
  nvtxEventAttributes_t attr{};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = message;
  nvtxDomainMarkEx(domain(), &attr);
}

}  // namespace mf
#endif  // MELFORGE_NO_CUDA
