// Enums that users spell as words (loss.type = aam_softmax, optim.schedule =
// cosine): one table of (value, name) pairs per enum, the one place its words
// live. Text becomes an enum once, at the configuration boundary, through
// parse_enum, whose error lists the choices; nothing downstream compares
// strings or maps an unknown word to a default.
//
//   inline constexpr NamedEnum<Color> kColorNames[] = {{Color::red, "red"}, {Color::blue, "blue"}};
//   Color c = parse_enum<Color>(kColorNames, text, "paint.color");  // throws: "paint.color: expected one of
//                                                                     //  red, blue, found 'green'"
//   std::string_view s = enum_name<Color>(kColorNames, c);             // "red"
// A table may give one value several names (aliases): enum_name returns the first.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/error.hpp"

namespace mf {

template <class E> struct NamedEnum {
  E value;
  std::string_view name;
};

// The value named `text`, or nullopt.
template <class E> std::optional<E> find_enum(std::span<const NamedEnum<E>> table, std::string_view text) {
  for (const NamedEnum<E>& e : table)
    if (e.name == text) return e.value;
  return std::nullopt;
}

// "a, b, c": the table's names, aliases left out.
template <class E> std::string enum_choices(std::span<const NamedEnum<E>> table) {
  std::string out;
  for (std::size_t i = 0; i < table.size(); ++i) {
    bool alias = false;
    for (std::size_t j = 0; j < i; ++j) alias = alias || table[j].value == table[i].value;
    if (alias) continue;
    if (!out.empty()) out += ", ";
    out += table[i].name;
  }
  return out;
}

// The value named `text`; otherwise throws mf::Error "<what>: expected one of
// <choices>, found '<text>'".
template <class E> E parse_enum(std::span<const NamedEnum<E>> table, std::string_view text, std::string_view what) {
  if (const auto v = find_enum(table, text)) return *v;
  MF_THROW("{}: expected one of {}, found '{}'", what, enum_choices(table), text);
}

// The first name of `value` ("?" for a value the table lacks: a table bug).
template <class E> std::string_view enum_name(std::span<const NamedEnum<E>> table, E value) {
  for (const NamedEnum<E>& e : table)
    if (e.value == value) return e.name;
  return "?";
}

}  // namespace mf
