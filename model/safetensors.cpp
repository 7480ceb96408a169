#include "model/safetensors.hpp"


#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/atomic_file.hpp"
#include "engine/error.hpp"

namespace fs = std::filesystem;

namespace mf::model {

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
  }
  return "?";
}

namespace {
// A JSON value of an untrusted header, for an error message: bounded in depth
// (deeper arrays print as [...], objects as {...}) and in length, so a
// deeply nested value cannot overflow the stack (json::dump recurses) and a
// huge one cannot flood the terminal.
std::string brief_json(const nlohmann::json& j, int depth = 0) {
  constexpr std::size_t kMaxChars = 120;
  constexpr int kMaxDepth = 2;
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::object: return j.empty() ? "{}" : "{...}";
    case T::array: {
      if (depth >= kMaxDepth) return j.empty() ? "[]" : "[...]";
      std::string s = "[";
      for (std::size_t i = 0; i < j.size(); ++i) {
        if (s.size() > kMaxChars) {
          s += ",...";
          break;
        }
        if (i) s += ',';
        s += brief_json(j[i], depth + 1);
      }
      return s + "]";
    }
    case T::string: {
      const auto& str = j.get_ref<const std::string&>();
      const nlohmann::json cut = str.size() > kMaxChars ? str.substr(0, kMaxChars) : str;
      return cut.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + (str.size() > kMaxChars ? "..." : "");
    }
    default: return j.dump();  // a number, a boolean or null
  }
}

// A name from an untrusted header, cut for messages.
std::string brief_name(const std::string& s) {
  constexpr std::size_t kMaxChars = 120;
  return s.size() > kMaxChars ? s.substr(0, kMaxChars) + "..." : s;
}

DType parse_st_dtype(const std::string& s, const std::string& ctx) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::u8})
    if (safetensors_dtype_name(t) == s) return t;
  MF_THROW("{}: dtype '{}' is not supported (expected F32, BF16, F16, I32 or U8)", ctx, brief_name(s));
}
}  // namespace

void SafeTensors::add(const std::string& name, HostArray tensor) {
  MF_CHECK(!name.empty() && name != "__metadata__", "safetensors: invalid tensor name '{}'", name);
  MF_CHECK(!tensors.count(name), "safetensors: tensor '{}' added twice", name);
  order.push_back(name);
  tensors[name] = std::move(tensor);
}

void SafeTensors::add(const std::string& name, DType dtype, const Shape& shape, const void* data) {
  add(name, HostArray(dtype, shape, data));
}

const HostArray& SafeTensors::at(const std::string& name) const {
  auto it = tensors.find(name);
  MF_CHECK(it != tensors.end(), "{}: no tensor '{}'", source, name);
  return it->second;
}

void write_safetensors(const fs::path& path, const SafeTensors& st) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!st.metadata.empty()) header["__metadata__"] = st.metadata;
  std::uint64_t offset = 0;
  for (const std::string& name : st.order) {
    const HostArray& t = st.at(name);
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  write_file_atomic(path, [&](const fs::path& tmp) {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MF_CHECK(f.good(), "safetensors: cannot create {}", tmp.string());
    unsigned char len[8];
    const std::uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(h.data(), std::streamsize(h.size()));
    for (const std::string& name : st.order) {
      const HostArray& t = st.at(name);
      f.write(reinterpret_cast<const char*>(t.bytes.data()), std::streamsize(t.bytes.size()));
    }
    f.close();
    MF_CHECK(!f.fail(), "safetensors: writing {} failed", tmp.string());
  });
}

SafeTensors read_safetensors(const fs::path& path) {
  const std::string ctx = path.string();
  std::ifstream f(path, std::ios::binary);
  MF_CHECK(f.good(), "{}: cannot open", ctx);
  f.seekg(0, std::ios::end);
  const std::uint64_t size = std::uint64_t(f.tellg());
  f.seekg(0);
  MF_CHECK(size >= 8, "{}: {} bytes, too short for a safetensors file", ctx, size);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(len[i]) << (8 * i);
  MF_CHECK(n <= size - 8 && n <= (100u << 20), "{}: header length {} does not fit in the file ({} bytes)", ctx, n,
           size);
  std::string h(n, '\0');
  f.read(h.data(), std::streamsize(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(h);
  } catch (const nlohmann::json::parse_error& e) {
    // The library's reason without its exception id or the raw bytes it last read.
    std::string why = e.what();
    if (const auto p = why.find("syntax error"); p != std::string::npos) why = why.substr(p);
    if (const auto p = why.find("; last read"); p != std::string::npos) why.resize(p);
    MF_THROW("{}: the header ({} bytes after its 8-byte length) is not valid JSON: at header byte {}: {}", ctx, n,
             e.byte, why);
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for any type (out_of_range.406)
    std::string why = e.what();
    if (const auto p = why.find("] "); why.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      why = why.substr(p + 2);
    if (why.size() > 120) why = why.substr(0, 120) + "...";
    MF_THROW("{}: the header ({} bytes after its 8-byte length) is not valid JSON: {}", ctx, n, why);
  }
  MF_CHECK(header.is_object(), "{}: the header is not a JSON object", ctx);
  const std::uint64_t data_size = size - 8 - n;
  SafeTensors st;
  st.source = ctx;
  struct Span {
    std::uint64_t b, e;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      MF_CHECK(v.is_object(), "{}: __metadata__ must be an object of strings", ctx);
      for (auto& [k, s] : v.items()) {
        MF_CHECK(s.is_string(), "{}: __metadata__.{} must be a string", ctx, brief_name(k));
        st.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string tctx = fmt::format("{}: tensor '{}'", ctx, brief_name(name));
    MF_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
             "{}: expected dtype, shape and data_offsets", tctx);
    HostArray t;
    MF_CHECK(v["dtype"].is_string(), "{}: dtype must be a string (e.g. \"F32\"), found {}", tctx,
             brief_json(v["dtype"]));
    t.dtype = parse_st_dtype(v["dtype"].get<std::string>(), tctx);
    MF_CHECK(v["shape"].is_array(), "{}: shape must be a list of non-negative integers, found {}", tctx,
             brief_json(v["shape"]));
    // The byte count, with every product checked: a crafted shape must not wrap.
    std::uint64_t want = dtype_size(t.dtype);
    for (const auto& d : v["shape"]) {
      MF_CHECK(d.is_number_unsigned(), "{}: shape entries must be non-negative integers, found {}", tctx,
               brief_json(d));
      const std::uint64_t dim = d.get<std::uint64_t>();
      MF_CHECK(dim <= std::uint64_t(std::numeric_limits<std::int64_t>::max()) &&
                   !__builtin_mul_overflow(want, dim, &want),
               "{}: shape {} is too large (its byte count overflows 64 bits)", tctx, brief_json(v["shape"]));
      t.shape.push_back(std::int64_t(dim));
    }
    const auto& off = v["data_offsets"];
    MF_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
             "{}: data_offsets must be [begin, end]", tctx);
    const std::uint64_t b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    MF_CHECK(b <= e && e <= data_size, "{}: data_offsets [{}, {}] outside the {}-byte data", tctx, b, e, data_size);
    MF_CHECK(e - b == want, "{}: {} bytes for shape {} {}, expected {}", tctx, e - b, shape_str(t.shape),
             dtype_name(t.dtype), want);
    spans.push_back({b, e, name});
    t.bytes.resize(want);
    f.seekg(std::streamoff(8 + n + b));
    f.read(reinterpret_cast<char*>(t.bytes.data()), std::streamsize(want));
    MF_CHECK(f.good(), "{}: reading the data failed (truncated file?)", tctx);
    st.tensors[name] = std::move(t);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& c) { return a.b < c.b || (a.b == c.b && a.e < c.e); });
  std::uint64_t at = 0;
  for (const Span& s : spans) {
    MF_CHECK(s.b == at, "{}: tensor '{}' starts at byte {}, expected {} (the data must have no holes or overlaps)",
             ctx, brief_name(s.name), s.b, at);
    at = s.e;
    st.order.push_back(s.name);
  }
  MF_CHECK(at == data_size, "{}: the header's data_offsets cover {} of the {} data bytes after the header (the "
           "tensors must fill them exactly)", ctx, at, data_size);
  return st;
}

}  // namespace mf::model
