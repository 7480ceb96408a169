#!/usr/bin/env python3
"""Table of bench/crops_side_by_side.sh's runs: test EER (and minDCF 0.05) of
melforge and PyTorch per configuration and seed, with the mean.

  crops_summary.py WORK      (reads WORK/out/{a,b,ab,c}-s*/compare-aam_softmax-*.json, or
                              WORK/{a,b,ab,c}-s*.json as in bench/results/crops-side-by-side-cpu-2026-11-28/;
                              ab: one run evaluated with 5 crops (a) and full length (b))
"""
import glob
import json
import os
import statistics
import sys

NAMES = {"a": "random crops, 5-crop eval", "b": "random crops, full-length eval", "c": "fixed segments (baseline)"}


def dcf_of(j, side, mode):
    """minDCF (P_target 0.05) of evaluation `mode` from a run's details."""
    det = j["details"][side]
    if side == "melforge":
        v = det["verify"] if mode == "5" else det.get(f"verify_{mode}", {})
    else:
        v = det["run"]["tests"].get(mode, {})
    return v.get("min_dcf_0.05")


def main(work):
    res = {}
    paths = sorted(glob.glob(os.path.join(work, "out", "*-s*", "compare-*.json")))
    paths = paths or sorted(glob.glob(os.path.join(work, "*-s*.json")))  # a results folder: TAG.json
    for path in paths:
        tag = (os.path.basename(os.path.dirname(path)) if os.path.basename(path).startswith("compare-")
               else os.path.basename(path)[:-len(".json")])
        cfg, seed = tag.split("-s")
        with open(path) as f:
            j = json.load(f)
        rows = {r["run"]: r for r in j["rows"]}
        if cfg == "ab":  # one training per side evaluated both ways: 5 crops (a) and full length (b)
            for sub, mode in (("a", "5"), ("b", "full")):
                res.setdefault(sub, {})[int(seed)] = {
                    k: dict(rows[k], test_eer=rows[k]["test_eer_by_eval"][mode], test_min_dcf_005=dcf_of(j, k, mode))
                    for k in ("melforge", "pytorch")}
            continue
        res.setdefault(cfg, {})[int(seed)] = {k: rows[k] for k in ("melforge", "pytorch")}
    print("| configuration | seed | melforge EER | PyTorch EER | melforge minDCF.05 | PyTorch minDCF.05 |"
          " melforge samples/s | PyTorch samples/s |")
    print("|---|---|---|---|---|---|---|---|")
    for cfg in sorted(res):
        eers = {"melforge": [], "pytorch": []}
        for seed in sorted(res[cfg]):
            r = res[cfg][seed]
            cells = []
            for k in ("melforge", "pytorch"):
                cells.append(f"{r[k]['test_eer']:.4f}" if r[k].get("status") == "ok" else r[k].get("status"))
                if r[k].get("status") == "ok":
                    eers[k].append(r[k]["test_eer"])
            dcf = [f"{r[k]['test_min_dcf_005']:.3f}" if r[k].get("test_min_dcf_005") is not None else "n/a"
                   for k in ("melforge", "pytorch")]
            sps = [f"{r[k].get('steady_samples_per_s') or float('nan'):.0f}" for k in ("melforge", "pytorch")]
            print(f"| {cfg}) {NAMES[cfg]} | {seed} | {cells[0]} | {cells[1]} | {dcf[0]} | {dcf[1]} | {sps[0]} | {sps[1]} |")
        m = [statistics.mean(eers[k]) if eers[k] else float("nan") for k in ("melforge", "pytorch")]
        sd = [statistics.stdev(eers[k]) if len(eers[k]) > 1 else float("nan") for k in ("melforge", "pytorch")]
        print(f"| **{cfg}) mean ± sd** | {len(eers['melforge'])} seeds | **{m[0]:.4f}** ± {sd[0]:.4f} | "
              f"**{m[1]:.4f}** ± {sd[1]:.4f} | | | | |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/crops-sbs")
