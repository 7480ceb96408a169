"""The configuration-described CNN stack in PyTorch (issue #16): the reference
module melforge's model.arch = "cnn" (and its presets) is compared against.

Built from the description melforge writes (model.json):
  {"in_mels": 40, "in_frames": 64, "classes": 5, "leak_head": false,
   "layers": [{"type": "conv", "k": 3, "cout": 16, ...}, ...]}
Input x: [N, 1, mels, frames] (NCHW, as LeakCNN in leakcnn_torch.py takes it);
forward returns (class logits [N, classes], leak logit [N] or None).

Layers (self.layers, an nn.ModuleList, so state_dict names are layers.{i}.*):
  conv       keys k (3), cout, stride (1), bias (not batch_norm),
             batch_norm (false), activation relu|none (relu), pool (1):
             layers.{i}.conv = Conv2d(cin, cout, k, stride, padding k//2),
             layers.{i}.bn = BatchNorm2d(cout) when batch_norm;
             conv -> bn -> activation -> MaxPool2d(pool) when pool > 1.
  residual   keys cout, stride (1), se (0): the basic block
             conv1 (3x3, stride) -> bn1 -> ReLU -> conv2 (3x3) -> bn2
             [-> squeeze-excitation se.fc1 (cout -> max(1, cout // se)), ReLU,
             se.fc2, sigmoid, per-channel scale of bn2's output], plus the
             shortcut: identity when stride == 1 and cin == cout, else
             downsample = Sequential(Conv2d 1x1 stride, no bias; BatchNorm2d);
             out = relu(main + shortcut).
  global_avg_pool        mean over H and W -> [N, C].
  attentive_stats_pool   keys stats (false), attention (0 = the channels C):
             xm = mean over H -> [N, W, C]; h = tanh(linear(xm)) (Linear(C, A));
             e = h @ attention ([A, 1] parameter) -> [N, W]; alpha = softmax
             over W; mu = sum_t alpha x; with stats also
             sigma = sqrt(clamp(sum_t alpha x^2 - mu^2, min 1e-5)) -> [N, 2C]
             (mu, then sigma), else [N, C].
  dense      keys units, activation relu|none (relu): layers.{i}.fc; a spatial
             input is flattened in NHWC order (h, w, c), melforge's layout, so
             melforge's dense weights need no column permutation.
  dropout    key p: nn.Dropout(p).
Heads on the last layer's output (flattened in NHWC order if still spatial):
class_head = Linear(D, classes), leak_head = Linear(D, 1) when leak_head
(None otherwise, as in LeakCNN).

Speaker verification (issue #20), optional description keys (or constructor
arguments, which take precedence): "input_norm" (false): InstanceNorm1d(mels)
of each mel band over time before the layers (self.input_norm, no
parameters); "embedding" (0): embedding = Linear(D, E), no activation, between
the layers and what follows; "loss" (softmax) with "margin" (0.2) and "scale"
(30): am_softmax / aam_softmax / angleproto replace the heads by the metric
loss's module self.loss (bench/metric_losses_torch.py: loss.weight, or loss.w
and loss.b), softmaxproto keeps class_head and adds angleproto's loss.w/b;
the leak head is refused with a metric loss. embed(x) returns the features the
heads and the loss read; forward returns (None, None) without a class head. Conv weights are OIHW here; melforge stores
OHWI (model/torch_layout.hpp converts). Unknown keys or layer types raise
ValueError so that a description melforge and this module read differently
cannot pass silently.

usage: python3 bench/cnn_stack_torch.py model.json   (prints the state_dict
names and shapes the description gives)
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from metric_losses_torch import has_class_head, make_loss

_KEYS = {
    "conv": {"k", "cout", "stride", "bias", "batch_norm", "activation", "pool"},
    "residual": {"cout", "stride", "se"},
    "global_avg_pool": set(),
    "attentive_stats_pool": {"stats", "attention"},
    "dense": {"units", "activation"},
    "dropout": {"p"},
}


def _relu_flag(spec, i):
    a = spec.get("activation", "relu")
    if a not in ("relu", "none"):
        raise ValueError(f"layers[{i}]: activation must be relu or none, got {a!r}")
    return a == "relu"


def _flatten_nhwc(x):
    """[N, C, H, W] -> [N, H*W*C] in (h, w, c) order; [N, F] unchanged."""
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1) if x.dim() == 4 else x


class ConvLayer(nn.Module):
    def __init__(self, cin, spec, i):
        super().__init__()
        k, stride = int(spec.get("k", 3)), int(spec.get("stride", 1))
        if k % 2 != 1 or stride not in (1, 2):
            raise ValueError(f"layers[{i}]: conv needs an odd k and stride 1 or 2, got k={k} stride={stride}")
        batch_norm = bool(spec.get("batch_norm", False))
        bias = bool(spec.get("bias", not batch_norm))
        self.conv = nn.Conv2d(cin, int(spec["cout"]), k, stride, padding=k // 2, bias=bias)
        self.bn = nn.BatchNorm2d(int(spec["cout"]), eps=1e-5, momentum=0.1) if batch_norm else None
        self.relu = _relu_flag(spec, i)
        self.pool = int(spec.get("pool", 1))

    def forward(self, x):
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        if self.relu:
            x = F.relu(x)
        return F.max_pool2d(x, self.pool) if self.pool > 1 else x


class SqueezeExcite(nn.Module):
    def __init__(self, c, ratio):
        super().__init__()
        hidden = max(1, c // ratio)
        self.fc1 = nn.Linear(c, hidden)
        self.fc2 = nn.Linear(hidden, c)

    def forward(self, x):
        g = torch.sigmoid(self.fc2(F.relu(self.fc1(x.mean((2, 3))))))
        return x * g[:, :, None, None]


class ResidualBlock(nn.Module):
    def __init__(self, cin, spec, i):
        super().__init__()
        cout, stride, se = int(spec["cout"]), int(spec.get("stride", 1)), int(spec.get("se", 0))
        if stride not in (1, 2) or se < 0:
            raise ValueError(f"layers[{i}]: residual needs stride 1 or 2 and se >= 0, got stride={stride} se={se}")
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
        self.se = SqueezeExcite(cout, se) if se > 0 else None
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1))

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        if self.se is not None:
            out = self.se(out)
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class GlobalAvgPool(nn.Module):
    def forward(self, x):
        return x.mean((2, 3))


class AttentiveStatsPool(nn.Module):
    def __init__(self, c, spec):
        super().__init__()
        a = int(spec.get("attention", 0)) or c
        self.stats = bool(spec.get("stats", False))
        self.linear = nn.Linear(c, a)
        self.attention = nn.Parameter(torch.empty(a, 1))
        nn.init.xavier_normal_(self.attention)

    def forward(self, x):
        xm = x.mean(dim=2).permute(0, 2, 1)  # [N, W, C]
        e = torch.matmul(torch.tanh(self.linear(xm)), self.attention).squeeze(2)  # [N, W]
        alpha = torch.softmax(e, dim=1).unsqueeze(2)
        mu = torch.sum(alpha * xm, dim=1)
        if not self.stats:
            return mu
        sigma = torch.sqrt((torch.sum(alpha * xm * xm, dim=1) - mu * mu).clamp(min=1e-5))
        return torch.cat((mu, sigma), dim=1)


class DenseLayer(nn.Module):
    def __init__(self, fin, spec, i):
        super().__init__()
        self.fc = nn.Linear(fin, int(spec["units"]))
        self.relu = _relu_flag(spec, i)

    def forward(self, x):
        x = self.fc(_flatten_nhwc(x))
        return F.relu(x) if self.relu else x


def _conv_out(n, k, stride):
    return (n + 2 * (k // 2) - k) // stride + 1


class CnnStack(nn.Module):
    def __init__(self, desc, embedding=None, input_norm=None, loss=None, margin=None, scale=None):
        super().__init__()
        self.in_mels, self.in_frames = int(desc["in_mels"]), int(desc["in_frames"])
        pick = lambda v, key, default: v if v is not None else desc.get(key, default)  # noqa: E731
        embedding, loss = int(pick(embedding, "embedding", 0)), str(pick(loss, "loss", "softmax"))
        self.loss_type = loss
        self.input_norm = nn.InstanceNorm1d(self.in_mels, eps=1e-5) if pick(input_norm, "input_norm", False) else None
        # (spatial, C, H, W) of the activation; flat activations have H = W = 1.
        spatial, c, h, w = True, 1, self.in_mels, self.in_frames
        self.layers = nn.ModuleList()
        for i, spec in enumerate(desc["layers"]):
            t = spec.get("type")
            if t not in _KEYS:
                raise ValueError(f"layers[{i}]: unknown type {t!r} (known: {sorted(_KEYS)})")
            extra = set(spec) - _KEYS[t] - {"type"}
            if extra:
                raise ValueError(f"layers[{i}] ({t}): unknown keys {sorted(extra)}")
            if t in ("conv", "residual", "global_avg_pool", "attentive_stats_pool") and not spatial:
                raise ValueError(f"layers[{i}] ({t}) needs a spatial input, but the previous layer is flat")
            if t == "conv":
                m = ConvLayer(c, spec, i)
                k, s, p = m.conv.kernel_size[0], m.conv.stride[0], m.pool
                c, h, w = m.conv.out_channels, _conv_out(h, k, s) // p, _conv_out(w, k, s) // p
            elif t == "residual":
                m = ResidualBlock(c, spec, i)
                c, h, w = m.conv1.out_channels, _conv_out(h, 3, m.conv1.stride[0]), _conv_out(w, 3, m.conv1.stride[0])
            elif t == "global_avg_pool":
                m = GlobalAvgPool()
                spatial, h, w = False, 1, 1
            elif t == "attentive_stats_pool":
                m = AttentiveStatsPool(c, spec)
                spatial, c, h, w = False, c * (2 if m.stats else 1), 1, 1
            elif t == "dense":
                m = DenseLayer(c * h * w, spec, i)
                spatial, c, h, w = False, m.fc.out_features, 1, 1
            else:
                m = nn.Dropout(float(spec["p"]))
            if h < 1 or w < 1:
                raise ValueError(f"layers[{i}] ({t}): the activation becomes empty ({h} x {w})")
            self.layers.append(m)
        self.features = c * h * w
        self.embedding = nn.Linear(self.features, embedding) if embedding > 0 else None
        e, classes = embedding if embedding > 0 else self.features, int(desc["classes"])
        leak_head = bool(desc.get("leak_head", False))
        if leak_head and loss != "softmax":
            raise ValueError(f"loss {loss}: the leak head goes with the softmax loss only")
        self.class_head = nn.Linear(e, classes) if has_class_head(loss) else None
        self.leak_head = nn.Linear(e, 1) if leak_head else None
        self.loss = make_loss(loss, e, classes, float(pick(margin, "margin", 0.2)), float(pick(scale, "scale", 30.0)))

    def embed(self, x):
        """The features the heads and the metric loss read: [N, E] (or [N, D])."""
        if self.input_norm is not None:
            x = self.input_norm(x.squeeze(1)).unsqueeze(1)
        for m in self.layers:
            x = m(x)
        x = _flatten_nhwc(x)
        return self.embedding(x) if self.embedding is not None else x

    def forward(self, x):
        x = self.embed(x)
        leak = self.leak_head(x).squeeze(1) if self.leak_head is not None else None
        return (self.class_head(x) if self.class_head is not None else None), leak


def load_description(path):
    with open(path) as f:
        return json.load(f)


def describe_params(desc):
    """[(name, shape)] of CnnStack(desc)'s state_dict, in order (parameters and
    batch norm buffers, num_batches_tracked included)."""
    return [(n, tuple(t.shape)) for n, t in CnnStack(desc).state_dict().items()]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: cnn_stack_torch.py model.json")
    for name, shape in describe_params(load_description(sys.argv[1])):
        print(name, " ".join(str(d) for d in shape))
