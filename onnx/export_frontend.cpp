// The log-mel front-end as ONNX nodes (onnx/export_parts.hpp): librosa's
// melspectrogram (center=True with zero padding, periodic Hann window, power
// 2, Slaney mel filters) then 10 log10(max(S, 1e-10)), as
// audio/frontend_params.hpp defines melforge's features.
#include <cmath>
#include <numbers>

#include "audio/mel_filterbank.hpp"
#include "onnx/export_parts.hpp"

namespace mf::onnx_export {

std::string emit_frontend(GraphBuilder& g, const audio::FrontendParams& p, const std::string& wave) {
  using I64s = std::vector<std::int64_t>;
  const std::int64_t half = p.n_fft / 2, bins = p.n_bins();
  // center=True: n_fft/2 zeros on each side of every waveform.
  const std::string padded =
      g.node("Pad", {wave, g.ints("frontend.pads", {0, half, 0, half})}, "frontend.padded", {{"mode", std::string("constant")}});
  const std::string signal = g.node("Unsqueeze", {padded, g.ints("frontend.signal_axis", {2})}, "frontend.signal");
  // scipy.signal.get_window('hann', n_fft, fftbins=True): the periodic Hann window.
  std::vector<float> window(std::size_t(p.n_fft));
  for (std::int64_t n = 0; n < p.n_fft; ++n)
    window[std::size_t(n)] = float(0.5 - 0.5 * std::cos(2.0 * std::numbers::pi * double(n) / double(p.n_fft)));
  // [N, frames, bins, 2]: the one-sided DFT of each frame (real, imaginary).
  const std::string spec = g.node("STFT",
                                  {signal, g.scalar_int("frontend.hop_length", p.hop_length),
                                   g.floats("frontend.window", {p.n_fft}, window),
                                   g.scalar_int("frontend.n_fft", p.n_fft)},
                                  "frontend.stft", {{"onesided", std::int64_t(1)}});
  const std::string power =
      g.node("ReduceSumSquare", {spec}, "frontend.power", {{"axes", I64s{3}}, {"keepdims", std::int64_t(0)}});
  // The Slaney filters of melforge's own front-end (librosa.filters.mel), [bins, n_mels] for MatMul.
  const audio::MelFilterbank fb = audio::mel_filterbank(p);
  std::vector<float> mel_t(std::size_t(bins * fb.n_mels));
  for (std::int64_t m = 0; m < fb.n_mels; ++m)
    for (std::int64_t k = 0; k < bins; ++k) mel_t[std::size_t(k * fb.n_mels + m)] = fb.weights[std::size_t(m * bins + k)];
  const std::string mel =
      g.node("MatMul", {power, g.floats("frontend.mel_filters", {bins, fb.n_mels}, mel_t)}, "frontend.mel");
  const std::string floored = g.node("Max", {mel, g.scalar("frontend.power_floor", 1e-10f)}, "frontend.mel_floored");
  const std::string ln = g.node("Log", {floored}, "frontend.ln");
  const std::string db =
      g.node("Mul", {ln, g.scalar("frontend.db_per_neper", float(10.0 / std::numbers::ln10))}, "frontend.db");
  return g.node("Transpose", {db}, "frontend.logmel", {{"perm", I64s{0, 2, 1}}});  // [N, n_mels, frames]
}

}  // namespace mf::onnx_export
