// model/host_array.hpp: the one host array of checkpoints and safetensors.
// Floats convert to and from every float dtype bit for bit as engine/dtype.hpp
// does, other dtypes are refused by name, and a checkpoint and a safetensors
// file written from HostArrays read back byte for byte.
#include <doctest/doctest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <filesystem>

#include "engine/error.hpp"
#include "model/checkpoint.hpp"
#include "model/host_array.hpp"
#include "model/safetensors.hpp"

namespace fs = std::filesystem;
using namespace mf;
using namespace mf::model;

namespace {
const std::vector<float> kValues{-2.5f, 1.f / 3.f, 0.f, -0.f, 65504.f, 1e-7f, 3.4e38f, INFINITY, NAN};

std::vector<std::uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<std::uint32_t> b;
  for (float x : v) b.push_back(std::bit_cast<std::uint32_t>(x));
  return b;
}
}  // namespace

TEST_CASE("HostArray: floats to and from f32, f16 and bf16 as engine/dtype.hpp converts them") {
  const Shape shape{3, 3};
  const HostArray f = HostArray::from_floats(kValues, shape, DType::f32);
  CHECK(f.shape == shape);
  CHECK(f.numel() == 9);
  CHECK(f.bytes.size() == 36);
  CHECK(bits_of(f.to_floats("f")) == bits_of(kValues));
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dt));
    const HostArray h = HostArray::from_floats(kValues, shape, dt);
    CHECK(h.bytes.size() == 18);
    std::vector<float> want;
    for (float x : kValues)
      want.push_back(dt == DType::f16 ? f16_bits_to_f32(f32_to_f16_bits(x)) : bf16_bits_to_f32(f32_to_bf16_bits(x)));
    CHECK(bits_of(h.to_floats("h")) == bits_of(want));
  }
  const HostArray empty = HostArray::from_floats({}, {0, 4}, DType::bf16);
  CHECK(empty.bytes.empty());
  CHECK(empty.to_floats("empty").empty());
  CHECK_THROWS_WITH_AS(HostArray::from_floats(kValues, {2, 2}, DType::f32), doctest::Contains("9 values for shape [2, 2]"),
                       Error);
  CHECK_THROWS_WITH_AS(HostArray::from_floats(kValues, shape, DType::i32), doctest::Contains("found i32"), Error);
}

TEST_CASE("HostArray: typed values; a non-float dtype is refused by name") {
  const std::vector<std::int32_t> ints{7, -9, 1 << 30};
  const HostArray a(DType::i32, {3}, ints.data());
  CHECK(a.values<std::int32_t>("a") == ints);
  CHECK_THROWS_WITH_AS(a.to_floats("model.safetensors: tensor 'count'"),
                       doctest::Contains("model.safetensors: tensor 'count' is i32, expected a float type"), Error);
  CHECK_THROWS_WITH_AS(a.values<float>("counts"), doctest::Contains("counts is i32, expected f32"), Error);
  const std::vector<bf16> b{bf16(1.f), bf16(-2.f)};
  const HostArray h(DType::bf16, {2}, b.data());
  CHECK(h.values<bf16>("h")[1].bits == b[1].bits);
  CHECK(h.to_floats("h") == std::vector<float>{1.f, -2.f});
}

TEST_CASE("HostArray: checkpoints and safetensors files keep every byte") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("mf_host_array_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const HostArray halves = HostArray::from_floats(kValues, {9}, DType::f16);
  const HostArray bfloats = HostArray::from_floats(kValues, {3, 3}, DType::bf16);
  Checkpoint c;
  c.arrays["w"] = halves;
  c.put("b", bfloats.dtype, bfloats.shape, bfloats.bytes.data());
  c.ints["step"] = 1;
  write_checkpoint(dir / "c.h5", c);
  const Checkpoint r = read_checkpoint(dir / "c.h5");
  CHECK(r.array("w").dtype == DType::f16);
  CHECK(r.array("w").bytes == halves.bytes);
  CHECK(r.array("b").shape == Shape{3, 3});
  CHECK(r.array("b").bytes == bfloats.bytes);

  SafeTensors st;
  st.add("w", halves);
  st.add("n", HostArray(DType::u8, {2}, "\x01\x02"));
  write_safetensors(dir / "m.safetensors", st);
  const SafeTensors sr = read_safetensors(dir / "m.safetensors");
  CHECK(sr.order == std::vector<std::string>{"w", "n"});
  CHECK(sr.at("w").bytes == halves.bytes);
  CHECK(sr.at("w").shape == Shape{9});
  CHECK(sr.at("n").bytes == std::vector<unsigned char>{1, 2});
  fs::remove_all(dir);
}
