// The waveform model's per-file outputs (onnx/export_parts.hpp): what `melforge
// predict --audio` and `embed --audio` write for each file, computed in the
// graph from the per-segment rows, with the rules of kernels/file_vote.hpp
// (class and leak votes) and train::file_embeddings (file embeddings).
#include "onnx/export_parts.hpp"

namespace mf::onnx_export {

namespace {

using I64s = std::vector<std::int64_t>;

std::string mean_over(GraphBuilder& g, const std::string& x, std::int64_t axis, const std::string& name) {
  return g.node("ReduceMean", {x}, name, {{"axes", I64s{axis}}, {"keepdims", std::int64_t(0)}});
}

// The class vote: each long segment votes for the argmax of its mean
// probabilities (the lowest class on a tie); the file's class has the most
// votes, a tie broken by the larger file-mean probability, then the lower
// class: ArgMax (which keeps the first maximum) of file_probs over the classes
// with the most votes (the others masked to -1).
void emit_class_vote(GraphBuilder& g, const std::string& rows, const FileShape& f, std::vector<GraphOutput>& out) {
  const std::string segs = g.node("Reshape", {rows, g.ints("file.class.shape", {-1, f.longs, f.shorts, f.classes})},
                                  "file.class.segments");
  const std::string longs = mean_over(g, segs, 2, "file.class.long_probs");  // [N, L, C]
  const std::string probs = mean_over(g, longs, 1, "file_probs");             // [N, C]
  const std::string long_vote =
      g.node("ArgMax", {longs}, "file.class.long_vote", {{"axis", std::int64_t(2)}, {"keepdims", std::int64_t(0)}});
  const std::vector<float> off_on{0.f, 1.f};
  const std::string one_hot = g.node(
      "OneHot", {long_vote, g.scalar_int("file.class.depth", f.classes), g.floats("file.class.off_on", {2}, off_on)},
      "file.class.one_hot_votes", {{"axis", std::int64_t(-1)}});
  const std::string votes = g.node("ReduceSum", {one_hot, g.ints("file.class.long_axis", {1})}, "file.class.votes",
                                   {{"keepdims", std::int64_t(0)}});
  const std::string most =
      g.node("ReduceMax", {votes}, "file.class.most_votes", {{"axes", I64s{1}}, {"keepdims", std::int64_t(1)}});
  const std::string top = g.node("Equal", {votes, most}, "file.class.top");
  const std::string masked =
      g.node("Where", {top, probs, g.scalar("file.class.masked", -1.f)}, "file.class.masked_probs");
  g.node("ArgMax", {masked}, "file_class", {{"axis", std::int64_t(1)}, {"keepdims", std::int64_t(0)}});
  out.push_back({"file_probs", {-1, f.classes}, onnx::TensorProto::FLOAT});
  out.push_back({"file_class", {-1}, onnx::TensorProto::INT64});
}

// The leak vote: a long segment votes leak when its mean leak probability is
// >= threshold; the file is a leak when more than half of its long segments
// vote leak, and on an exact tie when its mean leak probability is >= threshold.
void emit_leak_vote(GraphBuilder& g, const std::string& rows, const FileShape& f, std::vector<GraphOutput>& out) {
  const std::string segs =
      g.node("Reshape", {rows, g.ints("file.leak.shape", {-1, f.longs, f.shorts})}, "file.leak.segments");
  const std::string longs = mean_over(g, segs, 2, "file.leak.long_probs");  // [N, L]
  const std::string prob = mean_over(g, longs, 1, "file_leak_prob");         // [N]
  const std::string thr = g.scalar("file.leak.threshold", f.threshold);
  const std::string long_votes = g.node("Cast", {g.node("GreaterOrEqual", {longs, thr}, "file.leak.long_vote")},
                                        "file.leak.long_vote_f", {{"to", std::int64_t(onnx::TensorProto::FLOAT)}});
  const std::string twice = g.node("Mul", {g.node("ReduceSum", {long_votes, g.ints("file.leak.long_axis", {1})},
                                                  "file.leak.votes", {{"keepdims", std::int64_t(0)}}),
                                           g.scalar("file.leak.two", 2.f)},
                                   "file.leak.twice_votes");
  const std::string L = g.scalar("file.leak.longs", float(f.longs));
  const std::string more = g.node("Greater", {twice, L}, "file.leak.majority");
  const std::string tie = g.node("And", {g.node("Equal", {twice, L}, "file.leak.tie"),
                                         g.node("GreaterOrEqual", {prob, thr}, "file.leak.mean_over")},
                                 "file.leak.tie_leak");
  g.node("Cast", {g.node("Or", {more, tie}, "file.leak.decision")}, "file_leak",
         {{"to", std::int64_t(onnx::TensorProto::INT64)}});
  out.push_back({"file_leak_prob", {-1}, onnx::TensorProto::FLOAT});
  out.push_back({"file_leak", {-1}, onnx::TensorProto::INT64});
}

// The file embedding: the L2-normalised mean of its segments' embeddings; a
// zero mean stays zero, as train::normalize_rows leaves it (LpNormalization
// does not define 0 / 0, so the division is written out).
void emit_file_embedding(GraphBuilder& g, const std::string& rows, const FileShape& f, std::vector<GraphOutput>& out) {
  const std::string shape = g.ints("file.embedding.shape", {-1, f.longs * f.shorts, f.embedding});
  const std::string segs = g.node("Reshape", {rows, shape}, "file.embedding.segments");
  const std::string mean = mean_over(g, segs, 1, "file.embedding.mean");
  const std::string norm =
      g.node("ReduceL2", {mean}, "file.embedding.norm", {{"axes", I64s{1}}, {"keepdims", std::int64_t(1)}});
  const std::string safe = g.node("Max", {norm, g.scalar("file.embedding.tiny", 1e-30f)}, "file.embedding.norm_safe");
  g.node("Div", {mean, safe}, "file_embedding");
  out.push_back({"file_embedding", {-1, f.embedding}, onnx::TensorProto::FLOAT});
}

}  // namespace

std::vector<GraphOutput> emit_file_outputs(GraphBuilder& g, const FileRows& rows, const FileShape& f) {
  std::vector<GraphOutput> out;
  if (!rows.class_probs.empty()) emit_class_vote(g, rows.class_probs, f, out);
  if (!rows.leak_prob.empty()) emit_leak_vote(g, rows.leak_prob, f, out);
  if (!rows.embedding.empty()) emit_file_embedding(g, rows.embedding, f, out);
  return out;
}

}  // namespace mf::onnx_export
