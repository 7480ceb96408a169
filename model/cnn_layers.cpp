#include "model/cnn_layers.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/error.hpp"

namespace mf::model {

namespace {

struct TypeName {
  LayerType type;
  std::string_view name;
};
constexpr TypeName kTypes[] = {{LayerType::conv, "conv"},
                               {LayerType::residual, "residual"},
                               {LayerType::global_avg_pool, "global_avg_pool"},
                               {LayerType::attentive_stats_pool, "attentive_stats_pool"},
                               {LayerType::dense, "dense"},
                               {LayerType::dropout, "dropout"}};

// The keys each layer type takes (besides `type`).
std::vector<std::string_view> keys_of(LayerType t) {
  switch (t) {
    case LayerType::conv: return {"k", "cout", "stride", "bias", "batch_norm", "activation", "pool"};
    case LayerType::residual: return {"cout", "stride", "se"};
    case LayerType::global_avg_pool: return {};
    case LayerType::attentive_stats_pool: return {"stats", "attention"};
    case LayerType::dense: return {"units", "activation"};
    case LayerType::dropout: return {"p"};
  }
  return {};
}

std::string type_choices() {
  std::vector<std::string_view> v;
  for (const auto& t : kTypes) v.push_back(t.name);
  return fmt::format("{}", fmt::join(v, ", "));
}

// Typed reads of one key of a layer table, with errors naming it.
struct LayerTable {
  const toml::table& t;
  const std::string& where;

  const toml::node* get(std::string_view key) const { return t.get(key); }
  int integer(std::string_view key, int def, int lo, int hi) const {
    const toml::node* n = get(key);
    if (!n) return def;
    MF_CHECK(n->is_integer(), "{}.{}: expected an integer in [{}, {}], found {}", where, key, lo, hi,
             n->is_string() ? fmt::format("'{}'", *n->value<std::string>()) : std::string("another type"));
    const std::int64_t v = *n->value<std::int64_t>();
    MF_CHECK(v >= lo && v <= hi, "{}.{}: expected an integer in [{}, {}], found {}", where, key, lo, hi, v);
    return int(v);
  }
  bool boolean(std::string_view key, bool def) const {
    const toml::node* n = get(key);
    if (!n) return def;
    MF_CHECK(n->is_boolean(), "{}.{}: expected true or false, found another type", where, key);
    return *n->value<bool>();
  }
  std::string choice(std::string_view key, std::string def, const std::vector<std::string>& choices) const {
    const toml::node* n = get(key);
    if (!n) return def;
    MF_CHECK(n->is_string(), "{}.{}: expected one of {}, found another type", where, key, fmt::join(choices, ", "));
    const std::string v = *n->value<std::string>();
    MF_CHECK(std::find(choices.begin(), choices.end(), v) != choices.end(), "{}.{}: expected one of {}, found '{}'",
             where, key, fmt::join(choices, ", "), v);
    return v;
  }
  float number(std::string_view key, float def) const {
    const toml::node* n = get(key);
    if (!n) return def;
    MF_CHECK(n->is_integer() || n->is_floating_point(), "{}.{}: expected a number, found another type", where, key);
    return n->is_integer() ? float(*n->value<std::int64_t>()) : float(*n->value<double>());
  }
};

}  // namespace

std::string_view layer_type_name(LayerType t) {
  for (const auto& x : kTypes)
    if (x.type == t) return x.name;
  return "?";
}

CnnLayer parse_cnn_layer(const toml::node& node, const std::string& where) {
  const toml::table* t = node.as_table();
  MF_CHECK(t != nullptr, "{}: expected a table such as {{type = \"conv\", k = 3, cout = 32}}, found another type",
           where);
  const toml::node* tn = t->get("type");
  MF_CHECK(tn && tn->is_string(), "{}.type: expected one of {}, found {}", where, type_choices(),
           tn ? "another type" : "no type");
  const std::string name = *tn->value<std::string>();
  CnnLayer l;
  bool known = false;
  for (const auto& x : kTypes)
    if (x.name == name) {
      l.type = x.type;
      known = true;
    }
  MF_CHECK(known, "{}.type: expected one of {}, found '{}'", where, type_choices(), name);
  const std::vector<std::string_view> keys = keys_of(l.type);
  for (auto&& [k, v] : *t) {
    (void)v;
    if (k.str() == "type") continue;
    MF_CHECK(std::find(keys.begin(), keys.end(), k.str()) != keys.end(),
             "{}.{}: not a key of a {} layer (its keys: {})", where, k.str(), name,
             keys.empty() ? std::string("none besides type") : fmt::format("{}", fmt::join(keys, ", ")));
  }
  const LayerTable lt{*t, where};
  switch (l.type) {
    case LayerType::conv:
      l.k = lt.integer("k", 3, 1, 15);
      MF_CHECK(l.k % 2 == 1, "{}.k: expected an odd kernel size, found {}", where, l.k);
      MF_CHECK(lt.get("cout"), "{}.cout: a conv layer needs its output channels", where);
      l.cout = lt.integer("cout", 0, 1, kMaxChannels);
      l.stride = lt.integer("stride", 1, 1, 2);
      l.batch_norm = lt.boolean("batch_norm", false);
      l.bias = lt.boolean("bias", !l.batch_norm);
      l.relu = lt.choice("activation", "relu", {"relu", "none"}) == "relu";
      l.pool = lt.integer("pool", 1, 1, 15);
      break;
    case LayerType::residual:
      MF_CHECK(lt.get("cout"), "{}.cout: a residual block needs its output channels", where);
      l.cout = lt.integer("cout", 0, 1, kMaxChannels);
      l.stride = lt.integer("stride", 1, 1, 2);
      l.se = lt.integer("se", 0, 0, kMaxChannels);
      break;
    case LayerType::global_avg_pool: break;
    case LayerType::attentive_stats_pool:
      l.stats = lt.choice("stats", "mean", {"mean", "mean+std"}) == "mean+std";
      l.attention = lt.integer("attention", 0, 0, kMaxChannels);
      break;
    case LayerType::dense:
      MF_CHECK(lt.get("units"), "{}.units: a dense layer needs its width", where);
      l.units = lt.integer("units", 0, 1, 65536);
      l.relu = lt.choice("activation", "relu", {"relu", "none"}) == "relu";
      break;
    case LayerType::dropout:
      l.p = lt.number("p", 0.f);
      MF_CHECK(std::isfinite(l.p) && l.p >= 0.f && l.p < 1.f, "{}.p: expected a number in [0, 1), found {}", where,
               l.p);
      break;
  }
  return l;
}

std::vector<CnnLayer> parse_cnn_layers(const toml::node& node, std::string_view origin) {
  const std::string pre = origin.empty() ? std::string() : fmt::format("{}: ", origin);
  const toml::array* a = node.as_array();
  MF_CHECK(a != nullptr, "{}model.layers: expected a list of layer tables ([[model.layers]] in TOML), found another "
           "type", pre);
  std::vector<CnnLayer> out;
  for (std::size_t i = 0; i < a->size(); ++i)
    out.push_back(parse_cnn_layer(*a->get(i), fmt::format("{}model.layers[{}]", pre, i)));
  return out;
}

std::vector<ActShape> cnn_shapes(const std::vector<CnnLayer>& layers, int mels, int frames) {
  MF_CHECK(!layers.empty(), "model.layers: the cnn architecture needs at least one layer");
  ActShape s{true, mels, frames, 1};
  std::vector<ActShape> out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const CnnLayer& l = layers[i];
    const std::string where = fmt::format("model.layers[{}] ({})", i, layer_type_name(l.type));
    const bool needs_spatial = l.type == LayerType::conv || l.type == LayerType::residual ||
                               l.type == LayerType::global_avg_pool || l.type == LayerType::attentive_stats_pool;
    MF_CHECK(!needs_spatial || s.spatial, "{}: needs a spatial input [H, W, C], found flat features [{}] (after a "
             "pooling or dense layer)", where, s.c);
    switch (l.type) {
      case LayerType::conv:
        s.h = (s.h - 1) / l.stride + 1;
        s.w = (s.w - 1) / l.stride + 1;
        s.c = l.cout;
        MF_CHECK(s.h >= l.pool && s.w >= l.pool, "{}: pool {} does not fit the conv output {} x {}", where, l.pool,
                 s.h, s.w);
        s.h /= l.pool;
        s.w /= l.pool;
        break;
      case LayerType::residual:
        s.h = (s.h - 1) / l.stride + 1;
        s.w = (s.w - 1) / l.stride + 1;
        s.c = l.cout;
        break;
      case LayerType::global_avg_pool: s = ActShape{false, 1, 1, s.c}; break;
      case LayerType::attentive_stats_pool: s = ActShape{false, 1, 1, l.stats ? 2 * s.c : s.c}; break;
      case LayerType::dense:
        MF_CHECK(s.features() <= (std::int64_t(1) << 30), "{}: {} input features are too many", where, s.features());
        s = ActShape{false, 1, 1, l.units};
        break;
      case LayerType::dropout: break;
    }
    out.push_back(s);
  }
  return out;
}

const std::vector<std::string>& cnn_preset_names() {
  static const std::vector<std::string> n = {"resnet34se-light"};
  return n;
}

std::vector<CnnLayer> cnn_preset(std::string_view name) {
  if (name == "resnet34se-light") {
    std::vector<CnnLayer> v;
    CnnLayer stem;
    stem.type = LayerType::conv;
    stem.k = 7;
    stem.cout = 16;
    stem.stride = 2;
    stem.batch_norm = true;
    stem.bias = false;
    v.push_back(stem);
    const int blocks[] = {3, 4, 6, 3}, channels[] = {16, 32, 64, 128}, strides[] = {1, 2, 2, 1};
    for (int s = 0; s < 4; ++s)
      for (int b = 0; b < blocks[s]; ++b) {
        CnnLayer r;
        r.type = LayerType::residual;
        r.cout = channels[s];
        r.stride = b == 0 ? strides[s] : 1;
        r.se = 8;
        v.push_back(r);
      }
    CnnLayer pool;
    pool.type = LayerType::attentive_stats_pool;
    v.push_back(pool);
    CnnLayer emb;
    emb.type = LayerType::dense;
    emb.units = 512;
    emb.relu = false;
    v.push_back(emb);
    return v;
  }
  MF_THROW("model.arch: unknown preset '{}': expected leakcnn, cnn (with model.layers) or one of {}", name,
           fmt::join(cnn_preset_names(), ", "));
}

std::string cnn_layer_toml(const CnnLayer& l) {
  const std::string_view t = layer_type_name(l.type);
  switch (l.type) {
    case LayerType::conv:
      return fmt::format(R"({{ type = "{}", k = {}, cout = {}, stride = {}, bias = {}, batch_norm = {}, activation = "{}", pool = {} }})",
                         t, l.k, l.cout, l.stride, l.bias, l.batch_norm, l.relu ? "relu" : "none", l.pool);
    case LayerType::residual:
      return fmt::format(R"({{ type = "{}", cout = {}, stride = {}, se = {} }})", t, l.cout, l.stride, l.se);
    case LayerType::global_avg_pool: return fmt::format(R"({{ type = "{}" }})", t);
    case LayerType::attentive_stats_pool:
      return fmt::format(R"({{ type = "{}", stats = "{}", attention = {} }})", t, l.stats ? "mean+std" : "mean",
                         l.attention);
    case LayerType::dense:
      return fmt::format(R"({{ type = "{}", units = {}, activation = "{}" }})", t, l.units, l.relu ? "relu" : "none");
    case LayerType::dropout: {
      std::string p = fmt::format("{}", l.p);
      if (p.find_first_of(".eni") == std::string::npos) p += ".0";
      return fmt::format(R"({{ type = "{}", p = {} }})", t, p);
    }
  }
  return {};
}

std::string cnn_layer_json(const CnnLayer& l) {
  const std::string_view t = layer_type_name(l.type);
  switch (l.type) {
    case LayerType::conv:
      return fmt::format(R"({{"type": "{}", "k": {}, "cout": {}, "stride": {}, "bias": {}, "batch_norm": {}, "activation": "{}", "pool": {}}})",
                         t, l.k, l.cout, l.stride, l.bias, l.batch_norm, l.relu ? "relu" : "none", l.pool);
    case LayerType::residual:
      return fmt::format(R"({{"type": "{}", "cout": {}, "stride": {}, "se": {}}})", t, l.cout, l.stride, l.se);
    case LayerType::global_avg_pool: return fmt::format(R"({{"type": "{}"}})", t);
    case LayerType::attentive_stats_pool:
      return fmt::format(R"({{"type": "{}", "stats": {}, "attention": {}}})", t, l.stats ? "true" : "false",
                         l.attention);
    case LayerType::dense:
      return fmt::format(R"({{"type": "{}", "units": {}, "activation": "{}"}})", t, l.units, l.relu ? "relu" : "none");
    case LayerType::dropout: return fmt::format(R"({{"type": "{}", "p": {}}})", t, l.p);
  }
  return {};
}

std::string cnn_layer_str(const CnnLayer& l) {
  switch (l.type) {
    case LayerType::conv:
      return fmt::format("conv {}x{}/{} {}{}{}{}{}", l.k, l.k, l.stride, l.cout, l.bias ? " bias" : "",
                         l.batch_norm ? " bn" : "", l.relu ? " relu" : "",
                         l.pool > 1 ? fmt::format(" pool{}", l.pool) : std::string());
    case LayerType::residual:
      return fmt::format("residual {}/{}{}", l.cout, l.stride, l.se ? fmt::format(" se{}", l.se) : std::string());
    case LayerType::global_avg_pool: return "global_avg_pool";
    case LayerType::attentive_stats_pool:
      return fmt::format("attentive_stats_pool {}{}", l.stats ? "mean+std" : "mean",
                         l.attention ? fmt::format(" A{}", l.attention) : std::string());
    case LayerType::dense: return fmt::format("dense {}{}", l.units, l.relu ? " relu" : "");
    case LayerType::dropout: return fmt::format("dropout {}", l.p);
  }
  return {};
}

}  // namespace mf::model
