// The output heads of LeakCNN (model.heads): the class head alone ("class"),
// or the class head and the 0/1 leak head ("class+leak"). With the class head
// alone the model has no leak parameters, the loss no leak term, and no leak
// metric (leak AUC, false-alarm or detection rate) is computed or reported.
#pragma once

#include "io/dataset.hpp"
#include "model/run_config.hpp"

namespace mf::model {

// model.heads with `auto` resolved from the training data: class+leak when the
// data has leak targets of its own (the leak dataset, io::DatasetInfo::
// leak_in_file) or a class named "normal" (case-insensitive, the class
// io::Dataset derives the leak targets from), or data.normal_class names the
// no-leak class explicitly; class otherwise (spoken words, digits: a leak head
// there would report a meaningless leak AUC). An explicit class or class+leak
// is returned unchanged. Pure: reads only its arguments.
Heads resolve_heads(const RunConfig& cfg, const io::DatasetInfo& train);

// Whether the resolved configuration has the leak head. Throws mf::Error when
// model.heads is still auto (resolve it first).
bool has_leak_head(const RunConfig& cfg);

}  // namespace mf::model
