// safetensors: round trip, an independent parse in Python (torch decodes the
// 16-bit types), and malformed files.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/error.hpp"
#include "model/safetensors.hpp"
#include "tests/support/testing.hpp"

namespace fs = std::filesystem;
using namespace mf;
using namespace mf::model;

namespace {
SafeTensors sample() {
  SafeTensors st;
  std::vector<float> a{-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f};
  st.add("blocks.0.conv.weight", DType::f32, {2, 3}, a.data());
  std::vector<bf16> b{bf16(1.f), bf16(-2.f), bf16(0.5f), bf16(3.f)};
  st.add("head.bias", DType::bf16, {4}, b.data());
  std::vector<f16> c{f16(0.25f), f16(-1.f), f16(65504.f)};
  st.add("fc.weight", DType::f16, {3}, c.data());
  std::vector<std::int32_t> d{7, -9};
  st.add("count", DType::i32, {2}, d.data());
  st.metadata = {{"format", "pt"}, {"producer", "melforge"}};
  return st;
}
}  // namespace

TEST_CASE("safetensors round trip and an independent parse") {
  const fs::path p = fs::temp_directory_path() / fmt::format("mf_st_{}.safetensors", ::getpid());
  write_safetensors(p, sample());
  const SafeTensors r = read_safetensors(p);
  const SafeTensors s = sample();
  CHECK(r.order == s.order);
  CHECK(r.metadata == s.metadata);
  for (const auto& n : s.order) {
    CHECK(r.at(n).dtype == s.at(n).dtype);
    CHECK(r.at(n).shape == s.at(n).shape);
    CHECK(r.at(n).bytes == s.at(n).bytes);
  }
  CHECK(testing::run_oracle("safetensors_check.py", p.string()) == 0);
  fs::remove(p);
}

TEST_CASE("malformed safetensors files are errors naming the file") {
  const fs::path p = fs::temp_directory_path() / fmt::format("mf_st_bad_{}.safetensors", ::getpid());
  write_safetensors(p, sample());
  const auto size = fs::file_size(p);
  fs::resize_file(p, size - 3);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains("outside the"), Error);
  std::ofstream(p, std::ios::binary) << std::string("\x10\0\0\0\0\0\0\0{not json}      ", 24);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains("not valid JSON"), Error);
  std::ofstream(p, std::ios::binary) << std::string("\xff\xff\0\0\0\0\0\0{}", 10);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains("does not fit"), Error);
  CHECK_THROWS_WITH_AS(sample().at("nope"), doctest::Contains("no tensor 'nope'"), Error);
  fs::remove(p);
  // A failed rename reports the rename's error (not that of removing the temporary file).
  const fs::path d = fs::temp_directory_path() / fmt::format("mf_st_dir_{}", ::getpid());
  fs::create_directories(d / "taken.safetensors" / "inside");
  const std::string eisdir = std::error_code(EISDIR, std::generic_category()).message();
  CHECK_THROWS_WITH_AS(write_safetensors(d / "taken.safetensors", sample()),
                       doctest::Contains(eisdir.c_str()), Error);
  fs::remove_all(d);
}

TEST_CASE("a non-string dtype and shapes whose size overflows are errors naming the file and tensor") {
  const fs::path p = fs::temp_directory_path() / fmt::format("mf_st_crafted_{}.safetensors", ::getpid());
  auto write = [&](const std::string& header, std::size_t data_bytes) {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[std::size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    std::ofstream(p, std::ios::binary) << len << header << std::string(data_bytes, '\0');
  };
  write(R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})", 4);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains("tensor 'w': dtype must be a string"), Error);
  write(R"({"w":{"dtype":"F32","shape":7,"data_offsets":[0,4]}})", 4);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains("tensor 'w': shape must be a list"), Error);
  // 2^62 x 4 elements x 4 bytes wraps to 0 bytes: it must not pass as an empty tensor.
  write(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains("tensor 'w': shape [4611686018427387904,4] is too large"),
                       Error);
  write(R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})", 0);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains("is too large"), Error);
  CHECK_THROWS_WITH_AS(read_safetensors(p), doctest::Contains(p.string().c_str()), Error);
  fs::remove(p);
}

TEST_CASE("deeply nested or huge header values are described briefly, never dumped whole") {
  // Issue 21: the error message dumped the dtype with json::dump, which
  // recurses once per level: a million nested arrays overflowed the stack.
  const fs::path p = fs::temp_directory_path() / fmt::format("mf_st_nested_{}.safetensors", ::getpid());
  auto write = [&](const std::string& header) {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[std::size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    std::ofstream(p, std::ios::binary) << len << header;
  };
  constexpr std::size_t kDepth = 1000000;
  const std::string nested = std::string(kDepth, '[') + std::string(kDepth, ']');
  auto error = [&] {
    try {
      read_safetensors(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  write(R"({"w":{"dtype":)" + nested + R"(,"shape":[1],"data_offsets":[0,4]}})");
  std::string e = error();
  CHECK(e.find(p.string() + ": tensor 'w': dtype must be a string (e.g. \"F32\"), found [[[...]]]") != std::string::npos);
  CHECK(e.size() < 1000);
  write(R"({"w":{"dtype":"F32","shape":[1,)" + nested + R"(],"data_offsets":[0,4]}})");
  e = error();
  CHECK(e.find("tensor 'w': shape entries must be non-negative integers, found [[[...]]]") != std::string::npos);
  CHECK(e.size() < 1000);
  // A 1 MB dtype string and tensor name are cut in the message.
  const std::string big(1 << 20, 'x');
  write(R"({")" + big + R"(":{"dtype":")" + big + R"(","shape":[1],"data_offsets":[0,4]}})");
  e = error();
  CHECK(e.find("is not supported") != std::string::npos);
  CHECK(e.size() < 1000);
  fs::remove(p);
}
