#include "audio/frontend_params.hpp"

#include <utility>

#include "engine/error.hpp"

namespace mf::audio {

void FrontendParams::validate() const {
  MF_CHECK(sample_rate >= 1000 && sample_rate <= 384000, "front-end: sample_rate {} Hz: expected 1000..384000",
           sample_rate);
  MF_CHECK(n_fft >= 16 && n_fft <= 65536 && n_fft % 2 == 0, "front-end: n_fft {}: expected an even number in 16..65536",
           n_fft);
  MF_CHECK(hop_length >= 1 && hop_length <= n_fft, "front-end: hop_length {}: expected 1..n_fft ({})", hop_length,
           n_fft);
  MF_CHECK(n_mels >= 1 && n_mels <= 1024, "front-end: n_mels {}: expected 1..1024", n_mels);
  MF_CHECK(fmin >= 0, "front-end: fmin {} Hz: expected >= 0", fmin);
  MF_CHECK(fmax >= 0 && fmax <= double(sample_rate) / 2,
           "front-end: fmax {} Hz: expected 0 (= sample_rate / 2) or at most sample_rate / 2 = {}", fmax,
           double(sample_rate) / 2);
  MF_CHECK(fmin < fmax_hz(), "front-end: fmin {} Hz must be below fmax {} Hz", fmin, fmax_hz());
  MF_CHECK(frames >= 1 && frames <= 65536, "front-end: frames {}: expected 1..65536", frames);
  MF_CHECK(long_segments >= 1 && short_segments >= 1 && segments() <= 65536,
           "front-end: long {} x short {} segments: expected at least 1 each, at most 65536 in all", long_segments,
           short_segments);
}

std::string first_difference(const FrontendParams& a, const FrontendParams& b) {
  const std::pair<const char*, std::pair<double, double>> keys[] = {
      {"sample_rate", {double(a.sample_rate), double(b.sample_rate)}},
      {"n_fft", {double(a.n_fft), double(b.n_fft)}},
      {"hop_length", {double(a.hop_length), double(b.hop_length)}},
      {"n_mels", {double(a.n_mels), double(b.n_mels)}},
      {"fmin", {a.fmin, b.fmin}},
      {"fmax", {a.fmax_hz(), b.fmax_hz()}},
      {"frames", {double(a.frames), double(b.frames)}},
      {"long", {double(a.long_segments), double(b.long_segments)}},
      {"short", {double(a.short_segments), double(b.short_segments)}}};
  for (const auto& [key, v] : keys)
    if (v.first != v.second) return fmt::format("{} = {} vs {}", key, v.first, v.second);
  return {};
}

}  // namespace mf::audio
