#include "model/heads.hpp"

#include "engine/error.hpp"

namespace mf::model {

Heads resolve_heads(const RunConfig& cfg, const io::DatasetInfo& train) {
  if (cfg.heads != Heads::automatic) return cfg.heads;
  if (cfg.loss_type != LossType::softmax) return Heads::class_only;  // a metric loss: speakers, no leak head
  const bool leak = train.leak_in_file || io::find_normal_class(train.class_names) >= 0 || cfg.normal_class >= 0;
  return leak ? Heads::class_and_leak : Heads::class_only;
}

bool has_leak_head(const RunConfig& cfg) {
  MF_CHECK(cfg.heads != Heads::automatic,
           "model.heads: expected class or class+leak once resolved from the data, found auto");
  return cfg.heads == Heads::class_and_leak;
}

}  // namespace mf::model
