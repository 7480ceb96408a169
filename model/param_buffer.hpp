// ParamBuffer: every model parameter in one contiguous f32 master buffer, with
// the gradients, the AdamW moments and the working copy (bf16/f16, or the
// master itself in fp32) in buffers of the same layout; named views use the
// names of the equivalent PyTorch module (bench/leakcnn_torch.py).
//
// Layout of the flat buffers: all weights first, then all biases, so weight
// decay applies to [0, decay_end) and not to biases (kernels/adamw.hpp):
//   blocks.i.conv.weight  [Cout, k, k, Cin]  OHWI (PyTorch: OIHW [Cout, Cin, k, k])
//   fc.weight             [D, F]  F in melforge's flatten order (h, w, c): the
//                         activations are NHWC. PyTorch flattens NCHW (c, h, w),
//                         so its fc.weight is ours with the columns permuted:
//                         torch[d][c*H*W + h*W + w] = ours[d][(h*W + w)*C + c].
//   class_head.weight     [C, D]  (PyTorch layout)
//   leak_head.weight      [1, D]  directly after class_head.weight: together the
//                         two heads are one [C+1, D] dense layer (head_weight())
//   blocks.i.conv.bias [Cout], fc.bias [D], class_head.bias [C], leak_head.bias [1]
//                         (the two head biases adjacent: head_bias() is [C+1])
// A model without the leak head (ModelConfig::leak_head false, model.heads =
// class) has no leak_head.* parameters: head_weight() is [C, D], head_bias() [C].
// After the trunk: embedding.weight [E, D] and embedding.bias (model.embedding
// = E > 0), the heads (not with the cosine-margin or prototypical losses),
// loss.weight [C, E] (AM/AAM-softmax's class weights), loss.w and loss.b
// ([1] each, adjacent: the angular prototypical loss's scale and bias).
// A CNN stack (model.arch = cnn) has the parameters model/cnn_params.hpp lists,
// laid out by the same rule: the decayed weights (conv, linear) first, in the
// module's order, then the other trainable parameters (biases, batch norm's
// weight and bias), then batch norm's running statistics (never trained).
// Offsets are padded to multiples of 8 elements (16-byte aligned bf16 views)
// except inside the head pairs; padding stays zero in every buffer.
// Conversions to and from PyTorch's layouts: model/torch_layout.hpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor.hpp"
#include "model/model_config.hpp"

namespace mf::model {

enum class ParamKind : std::uint8_t {
  conv_weight,
  fc_weight,      // LeakCNN's fc (columns permuted against PyTorch's)
  linear_weight,
  bias,
  norm_weight,    // batch norm's gamma (init 1)
  norm_bias,      // batch norm's beta (init 0)
  running_mean,   // batch norm's statistics: not trained (init 0)
  running_var,    // (init 1)
  constant,       // a scalar initialised to ParamInfo::init_value (the prototypical loss's w, b)
};
// Weight decay applies to conv and linear weights only.
bool param_decays(ParamKind k);
// Batch norm's running statistics are kept in the buffers but never trained.
bool param_trainable(ParamKind k);

struct ParamInfo {
  std::string name;        // PyTorch state_dict name
  ParamKind kind;
  Shape shape;             // melforge layout
  Shape torch_shape;       // PyTorch layout
  std::int64_t offset = 0; // elements into the flat buffers
  std::int64_t numel = 0;
  std::int64_t fan_in = 1; // PyTorch's fan-in (init bound 1/sqrt(fan_in))
  bool decay = false;       // param_decays(kind)
  float init_value = 0.f;   // ParamKind::constant's initial value
  // A head: sized by the classes or the loss, not by the trunk (class_head.*,
  // leak_head.*, loss.*). --init-from re-initialises a head whose shape
  // differs from the source's (new classes); a trunk parameter must match.
  bool head = false;
};

// train.freeze's rule: `entry` names the parameter, or a prefix of its name
// that ends at a dot ("blocks.0" takes blocks.0.conv.weight, not blocks.10.*;
// "blocks.0." the same).
bool name_matches(std::string_view name, std::string_view entry);

// The parameters of a model and their offsets in the flat buffers, computed
// without allocating anything: what a checkpoint's declared shapes are checked
// against before a buffer is sized from them.
struct ParamLayout {
  std::vector<ParamInfo> params;
  std::int64_t size = 0, decay_end = 0;  // as ParamBuffer::size() and decay_end()
};
// The most parameters a model may have (its buffers then take 4 GiB).
inline constexpr std::int64_t kMaxParameters = std::int64_t(1) << 28;
// Throws mf::Error when the model is not valid (ModelConfig::validate) or has
// more than kMaxParameters parameters.
ParamLayout param_layout(const ModelConfig& cfg);

class ParamBuffer {
 public:
  ParamBuffer(const ModelConfig& cfg, DType work_dtype, Device device, cudaStream_t stream = nullptr);

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& info(const std::string& name) const;
  std::int64_t size() const { return size_; }          // flat elements (padding included)
  std::int64_t decay_end() const { return decay_end_; }
  std::int64_t count() const;                           // parameters (padding excluded)
  DType work_dtype() const { return work_dtype_; }
  Device device() const { return device_; }

  // The flat buffers [size()]. work() is master() in fp32.
  Tensor& master() { return master_; }
  Tensor& grad() { return grad_; }
  Tensor& m() { return m_; }
  Tensor& v() { return v_; }
  Tensor& work() { return work_; }
  const Tensor& master() const { return master_; }
  const Tensor& work() const { return work_; }

  // The parameters the entries of `key` (train.freeze) name, in layout order;
  // an entry that names none is an error that lists the modules (every name
  // without its last part: blocks.0.conv, fc, class_head, ...).
  std::vector<const ParamInfo*> matching(const std::vector<std::string>& entries, std::string_view key) const;

  // A named view (shape in melforge's layout) of any flat buffer of this layout.
  Tensor view(const Tensor& flat, const std::string& name) const;
  // The heads as one dense layer: [H, D] and [H], H = config().head_outputs()
  // (C+1 with the leak head, C without).
  Tensor head_weight(const Tensor& flat) const;
  Tensor head_bias(const Tensor& flat) const;

  // PyTorch's default init (Conv2d / Linear: kaiming_uniform(a=sqrt(5)) weights
  // and uniform(+-1/sqrt(fan_in)) biases, both U(-1/sqrt(fan_in), 1/sqrt(fan_in));
  // batch norm: weight 1, bias 0, running mean 0, running variance 1)
  // drawn from `seed` with melforge's own counter-based generator, in PyTorch's
  // element order (then converted to melforge's layout). Sets master, zeroes
  // grad, m and v, refreshes the working copy. Synchronous.
  void init(std::uint64_t seed, cudaStream_t stream = nullptr);
  // work = master cast to the working dtype (no-op in fp32).
  void refresh_work(cudaStream_t stream = nullptr);

 private:
  ModelConfig cfg_;
  DType work_dtype_;
  Device device_;
  std::vector<ParamInfo> params_;
  std::int64_t size_ = 0, decay_end_ = 0;
  Tensor master_, grad_, m_, v_, work_;
};

}  // namespace mf::model
