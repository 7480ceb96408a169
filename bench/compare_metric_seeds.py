#!/usr/bin/env python3
"""Issue 20's side by side over seeds: bench/compare_torch.py --loss L for each
metric loss and seed (the seed is both the data seed and the training seed),
then one summary JSON: per loss the EERs of both sides (mean, sd, the paired
difference and its standard error), minDCF at P_target 0.05 and the median
steady samples/s of each side and their ratio.

    python3 bench/compare_metric_seeds.py --python "$(bench/torch-venv.sh)" \\
      --melforge build/tools/melforge --seeds 0-9 --threads 1 --out bench/results

Each run is the configuration of bench/results/verify-cpu.md: LeakCNN 32/64/128
on 32x32 log-mels of 30 synthetic speakers (6 files each), dense 256,
embedding 256, batch 32, 15 epochs, AdamW lr 5e-3; angleproto with 2 segments
per speaker and batch (aam_softmax with none).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PER_CLASS = {"aam_softmax": 0, "am_softmax": 0, "angleproto": 2, "softmaxproto": 2}


def seeds_of(text):
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def run_one(args, loss, seed, out_json, work):
    synth = (f"--speakers 30 --files-per-speaker 6 --mels 32 --frames 32 --long 1 --short 4 --seed {seed}")
    cmd = [sys.executable, os.path.join(HERE, "compare_torch.py"), "--device", "cpu", "--loss", loss,
           "--per-class", str(PER_CLASS[loss]), "--epochs", str(args.epochs), "--batch-size", "32", "--lr", "5e-3",
           "--seed", str(seed), "--synth", synth, "--melforge", args.melforge, "--python", args.python,
           "--threads", str(args.threads), "--out", work, "--work", os.path.join(work, f"w-{loss}-s{seed}")]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    before = set(os.listdir(work)) if os.path.isdir(work) else set()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    made = sorted(f for f in set(os.listdir(work)) - before if f.startswith("compare-") and f.endswith(".json"))
    if not made:
        raise SystemExit(f"compare_metric_seeds: no JSON from {' '.join(cmd)}")
    os.replace(os.path.join(work, made[-1]), out_json)
    with open(out_json) as f:
        d = json.load(f)
    rows = {r["run"]: r for r in d["rows"]}
    rows["_run"] = {k: d.get(k) for k in ("date", "host_cpu", "git")}
    return rows


def summarize(per_seed):
    m_eer = [r["melforge"]["test_eer"] for r in per_seed.values()]
    p_eer = [r["pytorch"]["test_eer"] for r in per_seed.values()]
    diff = [a - b for a, b in zip(m_eer, p_eer)]
    m_sps = [r["melforge"]["steady_samples_per_s"] for r in per_seed.values()]
    p_sps = [r["pytorch"]["steady_samples_per_s"] for r in per_seed.values()]
    sd = statistics.stdev if len(diff) > 1 else (lambda _: 0.0)
    first = per_seed[min(per_seed)]
    return {
        "seeds": sorted(per_seed),
        "machine": first["_run"]["host_cpu"], "melforge_git": first["_run"]["git"],
        "pytorch_version": first["pytorch"].get("torch_version"),
        "melforge_eer_mean": statistics.mean(m_eer), "melforge_eer_sd": sd(m_eer),
        "pytorch_eer_mean": statistics.mean(p_eer), "pytorch_eer_sd": sd(p_eer),
        "paired_diff_mean": statistics.mean(diff), "paired_diff_sd": sd(diff),
        "paired_diff_se": sd(diff) / len(diff) ** 0.5,
        "melforge_min_dcf_0.05_mean": statistics.mean(r["melforge"]["test_min_dcf_005"] for r in per_seed.values()),
        "pytorch_min_dcf_0.05_mean": statistics.mean(r["pytorch"]["test_min_dcf_005"] for r in per_seed.values()),
        "melforge_samples_per_s_median": statistics.median(m_sps),
        "pytorch_samples_per_s_median": statistics.median(p_sps),
        "speed_ratio_median": statistics.median(a / b for a, b in zip(m_sps, p_sps)),
        "per_seed": {s: {"melforge_eer": r["melforge"]["test_eer"], "pytorch_eer": r["pytorch"]["test_eer"],
                         "melforge_samples_per_s": r["melforge"]["steady_samples_per_s"],
                         "pytorch_samples_per_s": r["pytorch"]["steady_samples_per_s"]}
                     for s, r in sorted(per_seed.items())},
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", required=True, help="interpreter with torch (bench/torch-venv.sh prints one)")
    p.add_argument("--melforge", default="build/tools/melforge")
    p.add_argument("--losses", default="aam_softmax,angleproto")
    p.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5")
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--threads", type=int, default=1, help="threads per side (OMP_NUM_THREADS, torch threads)")
    p.add_argument("--out", default="bench/results")
    p.add_argument("--tag", default=datetime.date.today().isoformat())
    args = p.parse_args()
    work = os.path.join(args.out, "compare-metric-work")
    os.makedirs(work, exist_ok=True)
    summary = {"what": "issue 20: compare_torch.py --loss over seeds (bench/compare_metric_seeds.py)",
               "threads_per_side": args.threads, "epochs": args.epochs, "summary": {}}
    for loss in args.losses.split(","):
        per_seed = {}
        for seed in seeds_of(args.seeds):
            out_json = os.path.join(args.out, f"compare-{loss}-cpu-seeds-{args.tag}-s{seed}.json")
            per_seed[seed] = run_one(args, loss, seed, out_json, work)
            r = per_seed[seed]
            print(f"{loss} seed {seed}: EER melforge {r['melforge']['test_eer']:.3f} pytorch "
                  f"{r['pytorch']['test_eer']:.3f}; samples/s {r['melforge']['steady_samples_per_s']:.0f} vs "
                  f"{r['pytorch']['steady_samples_per_s']:.0f}", flush=True)
        summary["summary"][loss] = summarize(per_seed)
        s = summary["summary"][loss]
        print(f"{loss}: EER {s['melforge_eer_mean']:.3f} vs {s['pytorch_eer_mean']:.3f} (paired diff "
              f"{s['paired_diff_mean']:+.3f} +- {s['paired_diff_se']:.3f} se); speed {s['speed_ratio_median']:.2f}x")
    path = os.path.join(args.out, f"compare-metric-cpu-seeds-{args.tag}-summary.json")
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
