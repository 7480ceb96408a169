#include "engine/tensor.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "engine/memory.hpp"

namespace mf {

std::string_view layout_name(Layout l) {
  switch (l) {
    case Layout::plain: return "plain";
    case Layout::nhwc: return "nhwc";
    case Layout::nchw: return "nchw";
  }
  return "?";
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::optional<std::int64_t> checked_numel(const Shape& s) {
  if (std::any_of(s.begin(), s.end(), [](std::int64_t d) { return d < 0; })) return std::nullopt;
  if (std::find(s.begin(), s.end(), 0) != s.end()) return 0;  // exact even where the other dims would overflow
  std::int64_t n = 1;
  for (auto d : s)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  return n;
}

std::int64_t shape_numel(const Shape& s) {
  const std::optional<std::int64_t> n = checked_numel(s);
  if (!n) [[unlikely]] {
    const bool negative = std::any_of(s.begin(), s.end(), [](std::int64_t d) { return d < 0; });
    MF_THROW("shape {}: expected non-negative dimensions whose product fits in 64 bits, found {}", shape_str(s),
             negative ? "a negative dimension" : "a product that overflows");
  }
  return *n;
}

Storage::Storage(std::size_t bytes, Device device, cudaStream_t stream)
    : bytes_(bytes), device_(device), stream_(stream) {
  ptr_ = device.is_cuda() ? device_alloc(bytes, device.index, stream) : host_alloc(bytes);
}

Storage::~Storage() {
  if (device_.is_cuda()) device_free(ptr_, stream_);
  else host_free(ptr_);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, Layout layout,
                     cudaStream_t stream) {
  for (auto d : shape) MF_CHECK(d >= 0, "tensor shape {} has a negative dimension", shape_str(shape));
  std::size_t bytes = 0;
  MF_CHECK(!__builtin_mul_overflow(std::size_t(shape_numel(shape)), dtype_size(dtype), &bytes),
           "tensor shape {} of {}: expected a byte count that fits in 64 bits, found an overflow", shape_str(shape),
           dtype_name(dtype));
  if (layout == Layout::nhwc || layout == Layout::nchw)
    MF_CHECK(shape.size() == 4, "layout {} needs a 4-d shape, got {}", layout_name(layout), shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.layout_ = layout;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device, stream);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, Layout layout,
                     cudaStream_t stream) {
  Tensor t = empty(shape, dtype, device, layout, stream);
  t.fill_bytes(0, stream);
  return t;
}

Tensor Tensor::from_floats(std::span<const float> values, const Shape& shape, DType dtype,
                           Layout layout) {
  MF_CHECK(std::int64_t(values.size()) == shape_numel(shape),
           "from_floats: {} values for shape {} ({} elements)", values.size(), shape_str(shape),
           shape_numel(shape));
  Tensor t = empty(shape, dtype, Device::cpu(), layout);
  void* p = t.raw();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    switch (dtype) {
      case DType::f32: static_cast<float*>(p)[i] = v; break;
      case DType::f16: static_cast<f16*>(p)[i] = f16(v); break;
      case DType::bf16: static_cast<bf16*>(p)[i] = bf16(v); break;
      case DType::i32: static_cast<std::int32_t*>(p)[i] = std::int32_t(v); break;
      case DType::u8: static_cast<std::uint8_t*>(p)[i] = std::uint8_t(v); break;
    }
  }
  return t;
}

std::int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += ndim();
  MF_CHECK(dim >= 0 && dim < ndim(), "dimension {} out of range for shape {}", dim, shape_str(shape_));
  return shape_[std::size_t(dim)];
}

void* Tensor::raw() const {
  return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr;
}

Tensor Tensor::reshape(const Shape& shape, Layout layout) const {
  MF_CHECK(shape_numel(shape) == numel(), "cannot reshape {} ({} elements) to {}", shape_str(shape_),
           numel(), shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  t.layout_ = layout;
  return t;
}

Tensor Tensor::slice(std::int64_t begin, std::int64_t end) const {
  MF_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0],
           "slice [{}, {}) out of range for shape {}", begin, end, shape_str(shape_));
  Tensor t = *this;
  const std::size_t row = numel() == 0 ? 0 : nbytes() / std::size_t(shape_[0]);
  t.offset_ += std::size_t(begin) * row;
  t.shape_[0] = end - begin;
  return t;
}

void Tensor::copy_from(const Tensor& src, cudaStream_t stream) {
  MF_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: source {} does not match destination {}",
           src.str(), str());
  if (nbytes() == 0) return;
  if (device_.is_cpu() && src.device_.is_cpu()) {
    std::memcpy(raw(), src.raw(), nbytes());
    return;
  }
  const cudaMemcpyKind kind = src.device_.is_cpu() ? cudaMemcpyHostToDevice
                              : device_.is_cpu()   ? cudaMemcpyDeviceToHost
                                                   : cudaMemcpyDeviceToDevice;
  if (stream == nullptr) MF_CUDA_CHECK(cudaDeviceSynchronize());  // producers on any stream
  MF_CUDA_CHECK(cudaMemcpyAsync(raw(), src.raw(), nbytes(), kind, stream));
  // Host reads follow; with no stream, consumers on any stream may follow.
  if (device_.is_cpu() || stream == nullptr) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

Tensor Tensor::to(Device device, cudaStream_t stream) const {
  Tensor t = empty(shape_, dtype_, device, layout_, stream);
  t.copy_from(*this, stream);
  return t;
}

void Tensor::fill_bytes(unsigned char byte, cudaStream_t stream) {
  if (nbytes() == 0) return;
  if (device_.is_cpu()) {
    std::memset(raw(), byte, nbytes());
    return;
  }
  if (stream == nullptr) MF_CUDA_CHECK(cudaDeviceSynchronize());  // see copy_from
  MF_CUDA_CHECK(cudaMemsetAsync(raw(), byte, nbytes(), stream));
  if (stream == nullptr) MF_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void Tensor::fill(float value, cudaStream_t stream) {
  // Build one host row of the pattern and copy: fills are not on the hot path.
  const std::vector<float> v(std::size_t(numel()), value);
  Tensor h = from_floats(v, shape_, dtype_, layout_);
  copy_from(h, stream);
  if (device_.is_cuda()) MF_CUDA_CHECK(cudaStreamSynchronize(stream));  // `h` dies here
}

std::vector<float> Tensor::to_floats() const {
  Tensor h = device_.is_cpu() ? *this : to(Device::cpu());
  std::vector<float> out(static_cast<std::size_t>(numel()));
  const void* p = h.raw();
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (dtype_) {
      case DType::f32: out[i] = static_cast<const float*>(p)[i]; break;
      case DType::f16: out[i] = float(static_cast<const f16*>(p)[i]); break;
      case DType::bf16: out[i] = float(static_cast<const bf16*>(p)[i]); break;
      case DType::i32: out[i] = float(static_cast<const std::int32_t*>(p)[i]); break;
      case DType::u8: out[i] = float(static_cast<const std::uint8_t*>(p)[i]); break;
    }
  }
  return out;
}

std::string Tensor::str() const {
  return fmt::format("{}{} {} on {}", dtype_name(dtype_), shape_str(shape_), layout_name(layout_),
                     device_.str());
}

void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* what) {
  MF_CHECK(t.shape() == expected, "{}: {} must have shape {}, got {}", op, what, shape_str(expected),
           shape_str(t.shape()));
}

void check_dtype(const Tensor& t, DType expected, const char* op, const char* what) {
  MF_CHECK(t.dtype() == expected, "{}: {} must be {}, got {}", op, what, dtype_name(expected),
           dtype_name(t.dtype()));
}

void check_float_dtype(const Tensor& t, const char* op, const char* what) {
  MF_CHECK(dtype_is_float(t.dtype()), "{}: {} must be f32, bf16 or f16, found {}", op, what, t.str());
}

void check_same_device(std::initializer_list<const Tensor*> ts, const char* op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t || t->numel() == 0) continue;
    if (!first) first = t;
    MF_CHECK(t->device() == first->device(), "{}: all tensors must be on one device, found {} and {}",
             op, first->device().str(), t->device().str());
  }
}

}  // namespace mf
