#include "audio/dataset_builder.hpp"

#include <algorithm>
#include <chrono>

#include "audio/feature_file.hpp"
#include "engine/atomic_file.hpp"
#include "engine/error.hpp"
#include "io/csv_table.hpp"

namespace fs = std::filesystem;

namespace mf::audio {

namespace {
using Clock = std::chrono::steady_clock;

// One split: its files through the pipeline into OUT/<split>.h5.
void build_split(const BuildOptions& opt, const SourceList& src, const std::vector<std::size_t>& members,
                 BuildSplit& out, BuildReport& report, const BuildProgress& progress) {
  out.files_listed = std::int64_t(members.size());
  out.files_per_class.assign(src.class_names.size(), 0);
  if (members.empty()) return;
  out.path = opt.out_dir / (out.name + ".h5");
  std::vector<FeatureFileEntry> entries;
  for (auto i : members) {
    const SourceFile& f = src.files[i];
    entries.push_back({opt.audio_root / f.path, f.path, f.label, f.leak});
  }
  const FeatureFileSpec spec{src.class_names, opt.dtype, opt.gzip, opt.pipeline};
  if (progress) progress(out.name, 0, out.files_listed, 0);
  const auto r = write_feature_file(out.path, entries, spec, [&](std::int64_t done, std::int64_t, double audio) {
    if (progress) progress(out.name, done, out.files_listed, audio);
  });
  out.files_written = std::int64_t(r.written.size());
  for (auto g : r.written) ++out.files_per_class[std::size_t(entries[g].label)];
  out.times = r.times;
  report.write_s += r.times.sink_s;
  for (std::size_t i = 0; i < r.outcomes.size(); ++i) {
    if (!r.outcomes[i].ok) report.skipped.push_back({entries[i].name, r.outcomes[i].reason});
    report.padded += r.outcomes[i].padded;
  }
}

}  // namespace

BuildReport build_dataset(const BuildOptions& opt, const BuildProgress& progress) {
  const auto t0 = Clock::now();
  opt.pipeline.frontend.validate();
  const SourceList src = opt.labels_csv.empty() ? find_sources_by_folder(opt.audio_root)
                                                : read_sources_csv(opt.labels_csv);
  BuildReport report;
  report.class_names = src.class_names;
  report.ignored = src.ignored;
  const auto parts = opt.split_by_csv.empty()
                         ? split_stratified(src.files, std::int64_t(src.class_names.size()), opt.split, opt.seed)
                         : split_by_groups(src.files, opt.split_by_csv, opt.split, opt.seed);
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  MF_CHECK(fs::is_directory(opt.out_dir), "--out {}: cannot create the folder ({})", opt.out_dir.string(), ec.message());
  for (std::size_t k = 0; k < 3; ++k) {
    report.splits[k].name = kSplitNames[k];
    build_split(opt, src, parts[k], report.splits[k], report, progress);
  }
  std::string skipped = "path,reason\n";
  for (const auto& s : report.skipped) skipped += io::csv_field(s.path) + "," + io::csv_field(s.reason) + "\n";
  write_text_atomic(opt.out_dir / "skipped.csv", skipped);
  report.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace mf::audio
