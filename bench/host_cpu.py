"""The host CPU's model name, as the bench scripts record it (one home for
compare_torch.py, torch_train.py, torch_extract.py and build_bench.py)."""
import platform


def cpu_model():
    """/proc/cpuinfo's first "model name", else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
