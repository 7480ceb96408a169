// What `melforge SUBCOMMAND --help` shows for an option: a type that says what
// to write (INT, FLOAT, PATH, DIR, NAME, {a,b,c} for a fixed set of words) and
// the default, as `--option TYPE=DEFAULT`. No option shows CLI11's bare TEXT
// (tests/tools/test_cli.cpp checks every subcommand).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

#include <string>
#include <vector>

#include "model/run_config.hpp"

namespace mf::cli {

// The words engine/device.hpp's parse_device accepts (N: a GPU index).
inline constexpr const char* kDeviceType = "{auto,cpu,cuda,cuda:N}";

// "{a,b,c}": the type shown for an option that takes one of `words`.
inline std::string one_of_type(const std::vector<std::string>& words) {
  std::string s = "{";
  for (std::size_t i = 0; i < words.size(); ++i) s += (i ? "," : "") + words[i];
  return s + "}";
}

// An option that takes one of `words`, checked by CLI11 while parsing; the
// help shows the words once, as the type (not also as the check's TEXT:{...}).
// --threshold's check: a leak decision threshold in (0, 1), as eval.threshold.
inline CLI::Validator leak_threshold_check() {
  return CLI::Validator(
      [](std::string& v) {
        double t = 0;
        const bool ok = CLI::detail::lexical_cast(v, t) && t > 0 && t < 1;
        return ok ? std::string{} : "expected a number in (0, 1), as eval.threshold, found " + v;
      },
      "(0,1)");
}

inline CLI::Option* checked_one_of(CLI::Option* opt, const std::vector<std::string>& words) {
  return opt->type_name(one_of_type(words))->check(CLI::IsMember(words).description(""));
}

// The audio input options of predict and embed: --audio (instead of --data,
// which `cmd` must already have), --set frontend.*, --pad, --threads; `rows`
// says how the command names its output rows for audio input.
inline void add_audio_input_options(CLI::App* cmd, std::vector<std::string>& audio, std::vector<std::string>& sets,
                                    bool& pad, int& threads, const std::string& rows) {
  auto* audio_opt = cmd->add_option("--audio", audio,
                                    "Audio files or folders (instead of --data): features as the checkpoint's "
                                    "training data was built; " + rows)
                        ->type_name("FILE_OR_DIR")  // CLI11 adds " ..." for a list
                        ->excludes(cmd->get_option("--data"));
  cmd->add_option("--set", sets, "With --audio: frontend.KEY=VALUE (for checkpoints that do not record them)")
      ->type_name("KEY=VALUE")
      ->needs(audio_opt);
  cmd->add_flag("--pad", pad, "With --audio: pad files too short for the model's segments with silence")
      ->needs(audio_opt);
  cmd->add_option("--threads", threads, "With --audio: decode threads (0: one per core)")->capture_default_str();
}

// Whole-utterance evaluation options of eval, embed and verify (eval.crops,
// eval.crop_frames of docs/training.md); empty / 0: the checkpoint's.
struct CropOptions {
  std::string crops;
  std::int64_t crop_frames = 0;
};
inline void add_crop_options(CLI::App* cmd, CropOptions& c) {
  cmd->add_option("--crops", c.crops,
                  "Whole-utterance data: N evenly spaced crops per utterance, or full (each utterance whole; models "
                  "ending in global or attentive pooling); default: the checkpoint's eval.crops")
      ->type_name("{N,full}");
  cmd->add_option("--crop-frames", c.crop_frames,
                  "Whole-utterance data: frames per crop (default: the checkpoint's eval.crop_frames, else "
                  "data.crop_frames)")
      ->type_name("INT");
}
// Sets them into the checkpoint's configuration, checked as --set would be.
inline void apply_crop_options(const CropOptions& c, model::RunConfig& cfg) {
  if (!c.crops.empty()) model::apply_override(cfg, "eval.crops=" + c.crops);
  if (c.crop_frames != 0) model::apply_override(cfg, "eval.crop_frames=" + std::to_string(c.crop_frames));
  model::validate(cfg);
}

}  // namespace mf::cli
