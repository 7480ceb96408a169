// Tensor: shape, dtype, device, layout tag and shared owning storage. No
// autograd: the model code owns the order of operations. Tensors are always
// dense and row-major over their shape; `layout` records what the dimensions
// mean for activations (NHWC on the device for conv activations: [N, H, W, C]).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/device.hpp"
#include "engine/dtype.hpp"
#include "engine/error.hpp"

namespace mf {

enum class Layout : std::uint8_t { plain, nhwc, nchw };
std::string_view layout_name(Layout l);

using Shape = std::vector<std::int64_t>;
std::string shape_str(const Shape& s);
// The element count of `s`, or nullopt when a dimension is negative or the
// product does not fit in int64. Shapes read from files are untrusted: size
// nothing from them before this says they are sane.
std::optional<std::int64_t> checked_numel(const Shape& s);
// The element count; throws mf::Error naming the shape when checked_numel
// has none (a negative dimension or an overflow), never wraps.
std::int64_t shape_numel(const Shape& s);

// Owns one allocation. Device storage is freed stream-ordered on the stream it
// was allocated on.
class Storage {
 public:
  Storage(std::size_t bytes, Device device, cudaStream_t stream);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
  cudaStream_t stream_ = nullptr;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised storage. On a GPU, stream-ordered on `stream`.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      Layout layout = Layout::plain, cudaStream_t stream = nullptr);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      Layout layout = Layout::plain, cudaStream_t stream = nullptr);
  // A CPU tensor holding a copy of `values` (converted to `dtype`).
  static Tensor from_floats(std::span<const float> values, const Shape& shape,
                            DType dtype = DType::f32, Layout layout = Layout::plain);

  bool defined() const { return storage_ != nullptr || numel() == 0; }
  const Shape& shape() const { return shape_; }
  std::int64_t size(int dim) const;
  int ndim() const { return int(shape_.size()); }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return std::size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  Layout layout() const { return layout_; }
  bool is_cuda() const { return device_.is_cuda(); }

  void* raw() const;
  template <class T> T* data() const {
    MF_CHECK(dtype_of_v<T> == dtype_, "tensor holds {} but was read as {}", dtype_name(dtype_),
             dtype_name(dtype_of_v<T>));
    return static_cast<T*>(raw());
  }

  // A tensor sharing this storage with another shape of the same numel.
  Tensor reshape(const Shape& shape, Layout layout = Layout::plain) const;
  // Rows [begin, end) of the first dimension, sharing storage.
  Tensor slice(std::int64_t begin, std::int64_t end) const;

  // Copies `src` into this tensor (same shape and dtype, any devices). Async on
  // `stream` when a GPU is involved; a copy to host memory returns once done.
  // With no stream (nullptr) a copy or fill that involves a GPU is synchronous
  // with the whole device: it waits for the work queued on every stream (our
  // streams are non-blocking, so the legacy default stream would not), and is
  // complete when it returns.
  void copy_from(const Tensor& src, cudaStream_t stream = nullptr);
  // A copy on `device`.
  Tensor to(Device device, cudaStream_t stream = nullptr) const;
  // Every element set to `value` (converted to the dtype).
  void fill(float value, cudaStream_t stream = nullptr);
  // Every byte set to `byte` (NaN-poisoning in tests: 0xff).
  void fill_bytes(unsigned char byte, cudaStream_t stream = nullptr);
  // Synchronous copy to host floats (any float or integer dtype).
  std::vector<float> to_floats() const;

  std::string str() const;  // "f32[2, 3] nhwc on cuda:0"

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;  // bytes into storage_
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  Layout layout_ = Layout::plain;
};

// Checks used by ops: throw with the op name, the expectation and what was found.
void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* what);
void check_dtype(const Tensor& t, DType expected, const char* op, const char* what);
// The float dtypes an op computes in (dtype_is_float: f32, bf16 or f16):
// "<op>: <what> must be f32, bf16 or f16, found <t.str()>".
void check_float_dtype(const Tensor& t, const char* op, const char* what);
void check_same_device(std::initializer_list<const Tensor*> ts, const char* op);

}  // namespace mf
