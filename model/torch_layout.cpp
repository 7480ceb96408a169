#include "model/torch_layout.hpp"

#include <fstream>
#include <sstream>

#include "engine/error.hpp"
#include "model/torch_layout_lab.hpp"

namespace mf::model {

namespace {
// Index maps: ours[i] <-> torch[perm(i)].
template <class Fn>
void for_each_pair(const ModelConfig& cfg, const ParamInfo& p, Fn&& f) {
  if (p.kind == ParamKind::conv_weight) {
    const std::int64_t co = p.shape[0], k = p.shape[1], ci = p.shape[3];
    for (std::int64_t o = 0; o < co; ++o)
      for (std::int64_t r = 0; r < k; ++r)
        for (std::int64_t s = 0; s < k; ++s)
          for (std::int64_t i = 0; i < ci; ++i)
            f(((o * k + r) * k + s) * ci + i, ((o * ci + i) * k + r) * k + s);
  } else if (p.kind == ParamKind::fc_weight) {
    const int L = cfg.blocks();
    const std::int64_t H = cfg.out_h(L - 1), W = cfg.out_w(L - 1), C = cfg.channels.back();
    const std::int64_t D = p.shape[0], F = p.shape[1];
    for (std::int64_t d = 0; d < D; ++d)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t w = 0; w < W; ++w)
          for (std::int64_t c = 0; c < C; ++c) f(d * F + (h * W + w) * C + c, d * F + (c * H + h) * W + w);
  } else {
    for (std::int64_t i = 0; i < p.numel; ++i) f(i, i);
  }
}
}  // namespace

std::vector<float> to_torch_layout(const ModelConfig& cfg, const ParamInfo& p, std::span<const float> ours) {
  MF_CHECK(std::int64_t(ours.size()) == p.numel, "to_torch_layout: {} values for {} ({} elements)", ours.size(),
           p.name, p.numel);
  std::vector<float> t(ours.size());
  for_each_pair(cfg, p, [&](std::int64_t o, std::int64_t tt) { t[std::size_t(tt)] = ours[std::size_t(o)]; });
  return t;
}

std::vector<float> from_torch_layout(const ModelConfig& cfg, const ParamInfo& p, std::span<const float> torch) {
  MF_CHECK(std::int64_t(torch.size()) == p.numel, "from_torch_layout: {} values for {} ({} elements)",
           torch.size(), p.name, p.numel);
  std::vector<float> o(torch.size());
  for_each_pair(cfg, p, [&](std::int64_t oo, std::int64_t t) { o[std::size_t(oo)] = torch[std::size_t(t)]; });
  return o;
}

std::vector<NamedArray> export_torch(const ParamBuffer& pb, const Tensor& flat) {
  const std::vector<float> all = flat.to_floats();
  MF_CHECK(std::int64_t(all.size()) == pb.size(), "export_torch: buffer {} is not of the layout ({} elements)",
           flat.str(), pb.size());
  std::vector<NamedArray> out;
  for (const ParamInfo& p : pb.params()) {
    std::span<const float> ours(all.data() + p.offset, std::size_t(p.numel));
    out.push_back({p.name, p.torch_shape, to_torch_layout(pb.config(), p, ours)});
  }
  return out;
}

void import_torch(const ParamBuffer& pb, Tensor& flat, const std::vector<NamedArray>& arrays) {
  MF_CHECK(flat.dtype() == DType::f32 && flat.numel() == pb.size(),
           "import_torch: destination {} must be an f32 buffer of {} elements", flat.str(), pb.size());
  std::vector<float> all = flat.to_floats();
  for (const ParamInfo& p : pb.params()) {
    const NamedArray* a = nullptr;
    for (const auto& x : arrays)
      if (x.name == p.name) a = &x;
    MF_CHECK(a != nullptr, "import_torch: parameter '{}' is missing", p.name);
    MF_CHECK(a->shape == p.torch_shape, "import_torch: '{}' has shape {}, expected PyTorch's {}", p.name,
             shape_str(a->shape), shape_str(p.torch_shape));
    const std::vector<float> ours = from_torch_layout(pb.config(), p, a->values);
    std::copy(ours.begin(), ours.end(), all.begin() + p.offset);
  }
  flat.copy_from(Tensor::from_floats(all, {pb.size()}));
  if (flat.is_cuda()) MF_CUDA_CHECK(cudaDeviceSynchronize());
}

void write_arrays(const std::string& dir, const std::vector<NamedArray>& arrays) {
  std::ofstream man(dir + "/manifest.txt");
  MF_CHECK(man.good(), "write_arrays: cannot write {}/manifest.txt", dir);
  for (const auto& a : arrays) {
    man << a.name;
    for (auto d : a.shape) man << ' ' << d;
    man << '\n';
    std::ofstream f(dir + "/" + a.name + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(a.values.data()), std::streamsize(a.values.size() * sizeof(float)));
    MF_CHECK(f.good(), "write_arrays: cannot write {}/{}.bin", dir, a.name);
  }
}

std::vector<NamedArray> read_arrays(const std::string& dir) {
  std::ifstream man(dir + "/manifest.txt");
  MF_CHECK(man.good(), "read_arrays: cannot read {}/manifest.txt", dir);
  std::vector<NamedArray> out;
  std::string line;
  while (std::getline(man, line)) {
    if (line.empty()) continue;
    std::istringstream ss(line);
    NamedArray a;
    ss >> a.name;
    std::int64_t d;
    while (ss >> d) a.shape.push_back(d);
    a.values.resize(std::size_t(shape_numel(a.shape)));
    std::ifstream f(dir + "/" + a.name + ".bin", std::ios::binary);
    f.read(reinterpret_cast<char*>(a.values.data()), std::streamsize(a.values.size() * sizeof(float)));
    MF_CHECK(f.good(), "read_arrays: {}/{}.bin is shorter than its shape {}", dir, a.name, shape_str(a.shape));
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace mf::model
