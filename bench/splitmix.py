"""engine/counter_rng.hpp's splitmix64_hash in Python, the one home of the
bench scripts' ports of melforge's counter-based draws (torch_train.py's
batch order and init, crop_rule.py's crops). No torch: numpy only."""
import numpy as np

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's gamma


def mix(z):
    """splitmix64_hash(z): the finalizer of z + gamma, on a Python int (mod 2^64)."""
    z = (z + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def mix_vec(z):
    """mix() on a uint64 array (NumPy's wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
