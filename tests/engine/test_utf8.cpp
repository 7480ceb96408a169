// engine/utf8.hpp against Python's UTF-8 decoder: each case below is a byte
// string Python's bytes.decode("utf-8") accepts or rejects at the index given
// (the indexes are UnicodeDecodeError.start of CPython 3.11 for each).
#include "engine/utf8.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace mf;

TEST_CASE("UTF-8: well-formed text of every sequence length is accepted") {
  CHECK(is_utf8(""));
  CHECK(is_utf8("normal"));
  CHECK(is_utf8("caf\xc3\xa9"));          // U+00E9, 2 bytes
  CHECK(is_utf8("\xe2\x82\xac"));         // U+20AC, 3 bytes
  CHECK(is_utf8("\xf0\x9f\x8e\xa4 mic"));  // U+1F3A4, 4 bytes
  CHECK(is_utf8("\xf4\x8f\xbf\xbf"));     // U+10FFFF, the largest
  CHECK(invalid_utf8_desc("ok").empty());
}

TEST_CASE("UTF-8: the first bad byte is found where Python's decoder stops") {
  struct Case {
    std::string bytes;
    std::size_t at;
  };
  const Case cases[] = {
      {"caf\xe9", 3},                // Latin-1 e-acute: a lead byte cut short
      {"\xff", 0},                   // never valid
      {"ab\x80", 2},                 // a lone continuation byte
      {"\xc3(", 0},                  // a lead byte without its continuation
      {"\xc0\xaf", 0},               // overlong '/'
      {"\xe0\x80\xaf", 0},           // overlong, 3 bytes
      {"\xed\xa0\x80", 0},           // a UTF-16 surrogate (U+D800)
      {"x\xf4\x90\x80\x80", 1},      // above U+10FFFF
      {"ok\xe2\x82", 2},             // cut short at the end
  };
  for (const Case& c : cases) {
    CAPTURE(c.bytes);
    REQUIRE(first_invalid_utf8(c.bytes).has_value());
    CHECK(*first_invalid_utf8(c.bytes) == c.at);
  }
  CHECK(invalid_utf8_desc("caf\xe9") == "byte 0xE9 at index 3");
}
