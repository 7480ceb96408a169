// Errors: exceptions that carry where they were raised (file:line), the failing
// call, and a message a user can act on. One family for every library melforge
// talks to (CUDA runtime, cuBLAS, cuDNN, HDF5 in io/), plus print-only variants
// for destructors, which must never throw.
//
// fmt 9 does not compile under nvcc in C++20 mode, so .cu files see only the
// CUDA-call checks; argument validation with formatted messages lives in the
// .cpp dispatch layer, before a kernel is launched.
#pragma once

#ifndef __CUDACC__
#include <fmt/format.h>
#endif

#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mf {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string where)
      : std::runtime_error(message + " [" + where + "]"),
        message_(std::move(message)), where_(std::move(where)) {}
  // The message without the location suffix.
  const std::string& message() const noexcept { return message_; }
  // "file:line".
  const std::string& where() const noexcept { return where_; }

 private:
  std::string message_;
  std::string where_;
};

// A failing call into the CUDA runtime or a CUDA library.
class CudaError : public Error {
 public:
  CudaError(std::string message, std::string where, int code)
      : Error(std::move(message), std::move(where)), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  int code_;
};

// What a user reads: an mf::Error's message without its source location,
// any other exception's what().
std::string user_message(const std::exception& e);

namespace detail {
std::string where(const char* file, int line);
[[noreturn]] void throw_error(const char* file, int line, std::string message);
[[noreturn]] void throw_cuda(const char* file, int line, const char* call,
                             const char* library, int code, std::string_view text);
void print_cuda(const char* file, int line, const char* call,
                const char* library, int code, std::string_view text) noexcept;
}  // namespace detail

}  // namespace mf

#ifndef __CUDACC__
// MF_CHECK(cond, "format {}", args...): throws mf::Error when cond is false.
#define MF_CHECK(cond, ...)                                                  \
  do {                                                                       \
    if (!(cond)) [[unlikely]]                                                \
      ::mf::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define MF_THROW(...) ::mf::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))
#endif

// The library-specific macros expand in the caller's translation unit, which
// includes the library's header; error.hpp itself needs only the runtime.
#define MF_CUDA_CHECK(call)                                                      \
  do {                                                                           \
    const cudaError_t mf_status_ = (call);                                       \
    if (mf_status_ != cudaSuccess) [[unlikely]]                                  \
      ::mf::detail::throw_cuda(__FILE__, __LINE__, #call, "CUDA", int(mf_status_), \
                               cudaGetErrorString(mf_status_));                  \
  } while (0)

#define MF_CUDA_CHECK_PRINT(call)                                                \
  do {                                                                           \
    const cudaError_t mf_status_ = (call);                                       \
    if (mf_status_ != cudaSuccess) [[unlikely]]                                  \
      ::mf::detail::print_cuda(__FILE__, __LINE__, #call, "CUDA", int(mf_status_), \
                               cudaGetErrorString(mf_status_));                  \
  } while (0)

// After a kernel launch: reports configuration errors at the launch site.
#define MF_CUDA_CHECK_LAUNCH() MF_CUDA_CHECK(cudaGetLastError())

#define MF_CUBLAS_CHECK(call)                                                        \
  do {                                                                               \
    const cublasStatus_t mf_status_ = (call);                                        \
    if (mf_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                            \
      ::mf::detail::throw_cuda(__FILE__, __LINE__, #call, "cuBLAS", int(mf_status_), \
                               cublasGetStatusString(mf_status_));                   \
  } while (0)

#define MF_CUDNN_CHECK(call)                                                        \
  do {                                                                              \
    const cudnnStatus_t mf_status_ = (call);                                        \
    if (mf_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                            \
      ::mf::detail::throw_cuda(__FILE__, __LINE__, #call, "cuDNN", int(mf_status_), \
                               cudnnGetErrorString(mf_status_));                    \
  } while (0)
