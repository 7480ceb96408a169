#!/usr/bin/env bash
# The Debian packages and the install rules (cmake/packaging.cmake), as a user
# gets them: cpack builds melforge's and melforge-bench's .deb from this build,
# they are unpacked into a fresh folder, and the programs run from there: --version, a tiny dataset
# and a one-epoch train on the CPU with an installed example configuration.
# Then `cmake --install --prefix` into another folder, checked the same way.
#   tests/tools/test_package.sh BUILD_DIR VERSION
set -euo pipefail
build=$1 version=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "test_package: $*" >&2; exit 1; }

(cd "$build" && cpack -G DEB -B "$work/pkg" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log" >&2; fail "cpack -G DEB failed"; }
deb=$(ls "$work"/pkg/melforge_*.deb 2>/dev/null | head -1)
bench_deb=$(ls "$work"/pkg/melforge-bench_*.deb 2>/dev/null | head -1)
[[ -n $deb && -n $bench_deb ]] || fail "cpack made no melforge_*.deb and melforge-bench_*.deb in $work/pkg: $(ls "$work/pkg")"
for d in "$deb" "$bench_deb"; do
  [[ $(dpkg-deb -f "$d" Version) == "$version" ]] || fail "$(basename "$d"): version $(dpkg-deb -f "$d" Version), expected $version"
done
[[ $(dpkg-deb -f "$deb" Package) == melforge ]] || fail "package name: expected melforge, found $(dpkg-deb -f "$deb" Package)"
depends=$(dpkg-deb -f "$deb" Depends) bench_depends=$(dpkg-deb -f "$bench_deb" Depends)
echo "test_package: melforge Depends: $depends"
echo "test_package: melforge-bench Depends: $bench_depends"
# Every library melforge links or loads, by the package Debian (or NVIDIA) ships it in; cuDNN only for the benchmarks.
for want in libhdf5 libsndfile libsoxr libfftw3-single libfmt libgomp1 libstdc++6 libc6 cuda-cudart- libcufft- libcublas-; do
  [[ ", $depends" == *", $want"* ]] || fail "melforge's Depends lacks $want: $depends"
done
[[ $depends != *cudnn* ]] || fail "melforge depends on cuDNN, which only melforge-bench links: $depends"
for want in "melforge (= $version)" libcudnn libcublas-; do
  [[ ", $bench_depends" == *", $want"* ]] || fail "melforge-bench's Depends lacks $want: $bench_depends"
done
dpkg-deb -c "$deb" | grep -q '/usr/bin/melforge-bench$' && fail "melforge_*.deb holds melforge-bench"

# run_installed ROOT: the installed programs work from ROOT, with nothing of the build tree.
run_installed() {
  local root=$1 mf=$1/bin/melforge
  [[ -x $mf && -x $root/bin/melforge-bench ]] || fail "no bin/melforge and bin/melforge-bench under $root"
  if readelf -d "$mf" | grep -E 'R(UN)?PATH' | grep -qF "$(cd "$build" && pwd -P)"; then
    fail "the installed melforge's RUNPATH names the build tree: $(readelf -d "$mf" | grep -E 'R(UN)?PATH')"
  fi
  for f in share/doc/melforge/README.md share/doc/melforge/LICENSE share/doc/melforge/docs/testing.md \
           share/melforge/examples/leakcnn-cpu-demo.toml share/melforge/bench/leakcnn_torch.py; do
    [[ -f $root/$f ]] || fail "not installed: $root/$f"
  done
  "$mf" --version > "$work/version.txt" || fail "$mf --version failed"
  grep -qx "melforge $version" "$work/version.txt" || fail "--version: expected 'melforge $version', found: $(cat "$work/version.txt")"
  "$root/bin/melforge-bench" --help > /dev/null || fail "$root/bin/melforge-bench --help failed"
  rm -rf "$work/data" "$work/run"
  "$mf" data synth --out "$work/data" --files 48 --classes 4 --mels 32 --frames 32 --long 2 --short 2 > /dev/null
  "$mf" train --config "$root/share/melforge/examples/leakcnn-cpu-demo.toml" --train "$work/data/train.h5" \
    --val "$work/data/val.h5" --out "$work/run" --epochs 1 --progress off > "$work/train.log" 2>&1 ||
    { cat "$work/train.log" >&2; fail "the installed melforge could not train"; }
  [[ -f $work/run/report.json && -f $work/run/checkpoints/best.h5 ]] || fail "train wrote no report.json or best.h5"
}

dpkg-deb -x "$deb" "$work/root"
dpkg-deb -x "$bench_deb" "$work/root"
run_installed "$work/root/usr"
cmake --install "$build" --prefix "$work/prefix" > /dev/null
run_installed "$work/prefix"
echo "test_package: $(basename "$deb") and $(basename "$bench_deb") install and run: $(head -1 "$work/version.txt")"
