#!/usr/bin/env bash
# Seed corpora for the fuzz targets, made from valid files melforge itself
# writes (plus one h5py-written dataset, the other writer users have):
#   OUT/dataset/      data synth train/val files (f16 contiguous, f32 chunked,
#                     gzip, whole utterances) and a flat h5py file with a /leak dataset
#   OUT/checkpoint/   ckpt-*.h5 and best.h5 of a short CPU training run (fp32
#                     and bf16)
#   OUT/safetensors/  that run exported as F32, BF16 and F16
#   OUT/run_config/   the run's resolved config.toml and hand-written configs
#                     with --set lines (the input format of fuzz_run_config),
#                     among them CNN stacks ([[model.layers]], every layer
#                     type, inline and --set forms, the preset, metric losses
#                     with an embedding, and edge cases: a pool or stride that
#                     leaves 1 x 1, a layer after a flat one, se > cout)
#   OUT/audio_decode/ tiny audio files written with libsndfile (through ctypes):
#                     WAV 16-bit, float (mono, stereo), 24-bit stereo, FLAC,
#                     OGG/Vorbis, AIFF, AU, CAF, W64, a header-only WAV, a
#                     truncated WAV and a FLAC whose header declares 2^36 - 1
#                     frames
#   OUT/trials/       trial lists for fuzz_trials' fixed name index (VoxCeleb
#                     names, tabs, CRLF, blank lines, a bad label, an unknown
#                     name, an extra field, a name with a space, a 64 KiB line)
#   OUT/audio_csv/    labels CSVs (header or not, leak column, quotes, CRLF,
#                     a UTF-8 BOM) and groups CSVs for fuzz_audio_csv's fixed
#                     file list, some with a '#0.8,0.1,0.1' first line (--split)
# The model is small (16 x 16 mels, channels [4,4,4], dense 8, 4 classes) so
# files are a few tens of KB and each execution is fast; fuzz_safetensors
# builds the same model.
#
# Usage: fuzz/make_seeds.sh [--melforge BUILD/tools/melforge] [--out fuzz/seeds]
# Takes about 30 s on 2 cores (any build of melforge: release, sanitized, fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
M=build/tools/melforge
OUT=fuzz/seeds
while (($#)); do
  case $1 in
    --melforge) M=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "make_seeds.sh: unknown argument $1 (expected --melforge BIN or --out DIR)" >&2; exit 2 ;;
  esac
done
[ -x "$M" ] || { echo "make_seeds.sh: no melforge binary at $M (build one, or pass --melforge)" >&2; exit 1; }
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# quiet MELFORGE ARGS...: runs melforge, shows its output only when it fails.
quiet() {
  "$M" "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log" >&2; echo "make_seeds.sh: melforge $* failed" >&2; exit 1; }
}
mkdir -p "$OUT"/{dataset,checkpoint,safetensors,run_config,audio_decode,audio_csv,trials}

# Datasets: small, three storage layouts and both float widths.
small=(--files 8 --classes 4 --mels 16 --frames 16 --long 2 --short 2)
quiet data synth --out "$work/d16" "${small[@]}" --seed 1
quiet data synth --out "$work/d32" "${small[@]}" --seed 2 --dtype f32 --storage chunked
quiet data synth --out "$work/dgz" "${small[@]}" --seed 3 --storage gzip
cp "$work/d16/val.h5" "$OUT/dataset/synth-f16-contiguous.h5"
cp "$work/d32/val.h5" "$OUT/dataset/synth-f32-chunked.h5"
cp "$work/dgz/val.h5" "$OUT/dataset/synth-f16-gzip.h5"
quiet data synth --out "$work/dutt" --speakers 6 --files-per-speaker 2 --mels 8 --frames 4 --max-frames 24 --utterances
cp "$work/dutt/val.h5" "$OUT/dataset/synth-utterances-f16-chunked.h5"
"$PY" - "$OUT/dataset/h5py-flat-leak.h5" <<'PYEOF'
import sys
import h5py
import numpy as np
rng = np.random.default_rng(7)
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("segments", data=rng.normal(size=(6, 16, 16)).astype(np.float16))
    f.create_dataset("labels", data=np.array([0, 1, 2, 0, 1, 2], dtype=np.int64))
    f.create_dataset("leak", data=np.array([0, 1, 1, 0, 1, 1], dtype=np.uint8))
    f["segments"].attrs["class_names"] = ["normal", "leak_a", "leak_b"]
    f["segments"].attrs["sample_rate"] = 16000
    f["segments"].attrs["hop_length"] = 256
    f["segments"].attrs["n_mels"] = 16
PYEOF

# Checkpoints and safetensors: a few CPU steps of the small model.
model=(--set model.channels=[4,4,4] --set model.dense=8)
for p in fp32 bf16; do
  quiet train --train "$work/d16/train.h5" --val "$work/d16/val.h5" --out "$work/run-$p" --device cpu \
    --precision $p --epochs 2 --batch-size 8 --limit-batches 2 "${model[@]}" --set checkpoint.keep_last=1 \
    --progress off
  cp "$work/run-$p/checkpoints/best.h5" "$OUT/checkpoint/best-$p.h5"
  cp "$(ls "$work/run-$p"/checkpoints/ckpt-*.h5 | head -1)" "$OUT/checkpoint/ckpt-$p.h5"
done
for d in f32 bf16 f16; do
  quiet export --checkpoint "$work/run-fp32/checkpoints/best.h5" --format safetensors --dtype $d \
    --out "$OUT/safetensors/model-$d.safetensors"
done

# Run configurations: the resolved config.toml and hand-written ones.
cp "$work/run-fp32/config.toml" "$OUT/run_config/resolved.toml"
cat > "$OUT/run_config/minimal.toml" <<'TOMLEOF'
[data]
train = "data/synth/train.h5"
val = "data/synth/val.h5"
[train]
epochs = 20
batch_size = 512
TOMLEOF
cat > "$OUT/run_config/sets.toml" <<'TOMLEOF'
[model]
channels = [16, 32, 64]
pools = [2, 2, 1]
dense = 128
dropout = 0.25
[optim]
lr = 2e-3
schedule = "linear"
warmup_steps = 100
[eval]
metric = "val.file.balanced_accuracy"
patience = 3
--set
optim.weight_decay=0.05
train.precision=bf16
reader.threads=4
run.profile_steps=10:20
data.normal_class=0
TOMLEOF
printf -- '--set\ntrain.epochs=3\nmodel.channels=[8, 8]\nmodel.pools=[2, 2]\neval.threshold=0.25\nrun.out=runs/x y\n' \
  > "$OUT/run_config/only-sets.toml"

# CNN stacks (docs/models.md): every layer type, the preset, metric losses.
cat > "$OUT/run_config/stack-every-layer.toml" <<'TOMLEOF'
[data]
train = "train.h5"
[model]
arch = "cnn"
heads = "class"
[[model.layers]]
type = "conv"
k = 3
cout = 8
batch_norm = true
pool = 2
[[model.layers]]
type = "conv"
k = 5
cout = 8
stride = 2
bias = true
activation = "none"
[[model.layers]]
type = "residual"
cout = 8
se = 4
[[model.layers]]
type = "residual"
cout = 16
stride = 2
se = 8
[[model.layers]]
type = "attentive_stats_pool"
stats = "mean+std"
attention = 8
[[model.layers]]
type = "dense"
units = 16
[[model.layers]]
type = "dropout"
p = 0.25
[[model.layers]]
type = "dense"
units = 8
activation = "none"
TOMLEOF
cat > "$OUT/run_config/stack-leakcnn-like-gap.toml" <<'TOMLEOF'
[data]
train = "train.h5"
[model]
arch = "cnn"
layers = [{type = "conv", cout = 4, pool = 2}, {type = "conv", cout = 8, pool = 2}, {type = "global_avg_pool"},
          {type = "dropout", p = 0.5}]
TOMLEOF
cat > "$OUT/run_config/stack-spatial-head-aam.toml" <<'TOMLEOF'
[data]
train = "train.h5"
[model]
arch = "cnn"
heads = "class"
[[model.layers]]
type = "conv"
k = 1
cout = 2
stride = 2
pool = 3
[[model.layers]]
type = "residual"
cout = 2
[loss]
type = "aam_softmax"
--set
model.embedding=16
data.per_class=2
TOMLEOF
cat > "$OUT/run_config/stack-angleproto-attentive-mean.toml" <<'TOMLEOF'
[data]
train = "train.h5"
per_class = 2
[model]
arch = "cnn"
heads = "class"
layers = [{type = "conv", k = 7, cout = 4, stride = 2, batch_norm = true}, {type = "residual", cout = 4, se = 16},
          {type = "attentive_stats_pool"}, {type = "dense", units = 8, activation = "none"}]
[loss]
type = "softmaxproto"
TOMLEOF
printf '%s\n' '[data]' 'train = "train.h5"' '[model]' 'arch = "resnet34se-light"' 'heads = "class"' '[loss]' 'type = "am_softmax"' \
  > "$OUT/run_config/preset-resnet34se-light.toml"
printf -- '--set\ndata.train=t.h5\nmodel.arch=cnn\nmodel.layers=[{type="conv", cout=16, batch_norm=true, pool=2}, {type="global_avg_pool"}]\nmodel.input_norm=instance\n' \
  > "$OUT/run_config/stack-only-sets.toml"
# Edge cases: a pool that leaves 1 x 1 on 8 x 8, a conv after a flat layer, an
# unknown key (errors the fuzzer mutates into near-valid stacks).
printf '%s\n' '[data]' 'train = "train.h5"' '[model]' 'arch = "cnn"' 'layers = [{type = "conv", cout = 1, k = 15, pool = 8}, {type = "residual", cout = 3, stride = 2, se = 4096}]' \
  > "$OUT/run_config/stack-edge-pool8.toml"
printf '%s\n' '[data]' 'train = "train.h5"' '[model]' 'arch = "cnn"' 'layers = [{type = "global_avg_pool"}, {type = "conv", cout = 2}]' \
  > "$OUT/run_config/stack-conv-after-flat.toml"
printf '%s\n' '[data]' 'train = "train.h5"' '[model]' 'arch = "cnn"' '[[model.layers]]' 'type = "dense"' 'units = 4' 'pool = 2' \
  > "$OUT/run_config/stack-unknown-key.toml"

# Trial lists for fuzz_trials (its names: fuzz/fuzz_trials.cpp kNames).
T="$OUT/trials"
printf '1 id10270/x6uYqmx31kE/00001.wav id10270/8jEAjG6SegY/00008.wav\n0 id10270/x6uYqmx31kE/00001.wav id10273/0OCW1HUxZyg/00001.wav\n1 id10273/0OCW1HUxZyg/00001.wav id10273/alFx8mJQSOo/00002.wav\n' \
  > "$T/voxceleb.txt"
printf '1\ta\tb\r\n\r\n0  a   1 \r\n  \t \n1 0 données/é.wav\n0 b a' > "$T/tabs-crlf-blank-no-final-newline.txt"
printf '1 a b\n2 a b\n' > "$T/bad-label.txt"
printf '1 a b\n0 a c\n' > "$T/unknown-name.txt"
printf '1 a b b\n' > "$T/extra-field.txt"
printf '1 has space.wav a\n' > "$T/name-with-space.txt"
printf '01 a b\n-0 a b\n1.0 a b\n' > "$T/label-spellings.txt"
{ printf '1 a '; head -c 65536 /dev/zero | tr '\0' 'x'; printf '\n0 a b\n'; } > "$T/huge-line.txt"

# Audio files: a few dozen frames each (OGG/Vorbis is ~4 KB of codebooks).
"$PY" - "$OUT/audio_decode" <<'PYEOF'
import ctypes, math, os, struct, sys
out = sys.argv[1]
sf = ctypes.CDLL("libsndfile.so.1")
class SF_INFO(ctypes.Structure):
    _fields_ = [("frames", ctypes.c_int64), ("samplerate", ctypes.c_int), ("channels", ctypes.c_int),
                ("format", ctypes.c_int), ("sections", ctypes.c_int), ("seekable", ctypes.c_int)]
sf.sf_open.restype = ctypes.c_void_p
sf.sf_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(SF_INFO)]
sf.sf_writef_float.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64]
sf.sf_writef_float.restype = ctypes.c_int64
sf.sf_close.argtypes = [ctypes.c_void_p]
sf.sf_strerror.restype = ctypes.c_char_p
WAV, AIFF, AU, W64, FLAC, CAF, OGG = 0x010000, 0x020000, 0x030000, 0x0B0000, 0x170000, 0x180000, 0x200000
PCM16, PCM24, FLOAT, ULAW, VORBIS = 0x2, 0x3, 0x6, 0x10, 0x60
def write(name, fmt, rate, channels, frames):
    x = [0.5 * math.sin(2 * math.pi * 440 * (1 + c / 4) * t / rate + c) for t in range(frames) for c in range(channels)]
    info = SF_INFO(0, rate, channels, fmt, 0, 0)
    path = os.path.join(out, name).encode()
    f = sf.sf_open(path, 0x20, ctypes.byref(info))
    if not f:
        sys.exit("make_seeds.sh: libsndfile cannot write %s: %s" % (name, sf.sf_strerror(None).decode()))
    buf = (ctypes.c_float * len(x))(*x)
    if frames and sf.sf_writef_float(f, buf, frames) != frames:
        sys.exit("make_seeds.sh: short write of " + name)
    sf.sf_close(f)
write("wav16-mono.wav", WAV | PCM16, 8000, 1, 64)
write("wav-float-mono.wav", WAV | FLOAT, 16000, 1, 48)
write("wav24-stereo.wav", WAV | PCM24, 22050, 2, 40)
write("wav-float-stereo.wav", WAV | FLOAT, 48000, 2, 24)
write("wav16-header-only.wav", WAV | PCM16, 16000, 1, 0)
write("flac16-mono.flac", FLAC | PCM16, 16000, 1, 64)
write("flac24-stereo.flac", FLAC | PCM24, 44100, 2, 64)
write("vorbis-mono.ogg", OGG | VORBIS, 16000, 1, 256)
write("aiff16-stereo.aiff", AIFF | PCM16, 11025, 2, 32)
write("au-ulaw.au", AU | ULAW, 8000, 1, 64)
write("caf16.caf", CAF | PCM16, 16000, 1, 32)
write("w64-float.w64", W64 | FLOAT, 16000, 1, 32)
# A WAV cut inside its data chunk (the header declares 64 frames).
data = open(os.path.join(out, "wav16-mono.wav"), "rb").read()
open(os.path.join(out, "wav16-truncated.wav"), "wb").write(data[:len(data) - 51])
# A FLAC whose STREAMINFO declares 2^36 - 1 frames (36 bits, the largest) and
# holds 64: decode_mono must not size anything from the declared count.
flac = bytearray(open(os.path.join(out, "flac16-mono.flac"), "rb").read())
assert flac[:4] == b"fLaC" and (flac[4] & 0x7F) == 0  # STREAMINFO first, its 34 bytes from offset 8
# The 36-bit total-samples field: the low 4 bits of the block's byte 13, then bytes 14-17.
flac[8 + 13] = (flac[8 + 13] & 0xF0) | 0x0F
flac[8 + 14:8 + 18] = b"\xff\xff\xff\xff"
open(os.path.join(out, "flac16-huge-frame-count.flac"), "wb").write(bytes(flac))
PYEOF

# CSV tables: labels (path,label[,leak]) and groups (path,group) for the fixed
# file list of fuzz_audio_csv (a.wav b/c.wav d.flac "e f.wav" "x,y.ogg").
C="$OUT/audio_csv"
printf 'path,label\nnormal/a.wav,normal\nleak/b.wav,leak\nleak/sub/c.flac,leak\nnormal/d.ogg,normal\n' > "$C/labels-header.csv"
printf '\xef\xbb\xbfpath,label,leak\r\na.wav,pump,0\r\nb/c.wav,valve,1\r\n d.flac , pump ,1\r\n' > "$C/labels-leak-bom-crlf.csv"
printf '# no header, numeric labels, quoted fields\n"x,y.ogg",10\n"say ""hi"".wav",2\n\n"two\nlines.wav",10\n./e f.wav,2\n' \
  > "$C/labels-no-header-quotes.csv"
printf '#0.8,0.1,0.1\npath,group\na.wav,spk1\nb/c.wav,spk2\nd.flac,spk1\ne f.wav,spk3\n"x,y.ogg",spk2\n' > "$C/groups.csv"
printf '#0.5,0.5,0\r\na.wav,train\r\nb/./c.wav,val\r\nd.flac,test\r\ne f.wav,train\r\n"x,y.ogg",test\r\n' \
  > "$C/groups-explicit-crlf.csv"
printf '0.7, 0.15 ,0.15\n' > "$C/split-only.csv"

for t in dataset checkpoint safetensors run_config audio_decode audio_csv trials; do
  echo "$OUT/$t: $(ls "$OUT/$t" | wc -l) seeds, $(du -sk "$OUT/$t" | cut -f1) KiB"
done
