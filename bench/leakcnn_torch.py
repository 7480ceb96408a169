"""LeakCNN in PyTorch: the reference module melforge is compared against.

Its state_dict names are melforge's parameter names (model/param_buffer.hpp).
Layout differences (handled by model/torch_layout.hpp on melforge's side):
  * conv weights: PyTorch OIHW [Cout, Cin, k, k]; melforge OHWI [Cout, k, k, Cin].
  * fc.weight [D, F]: PyTorch flattens the last block's NCHW output (c, h, w);
    melforge flattens NHWC (h, w, c), so its fc.weight columns are permuted:
    torch[d, c*H*W + h*W + w] == melforge[d, (h*W + w)*C + c].
  * input: PyTorch [N, 1, mels, frames]; melforge [N, mels, frames, 1] (the same
    memory, as there is one channel).
The two heads are separate nn.Linear here; melforge stores them adjacently and
runs them as one [C+1, D] layer, which computes the same logits. With
leak_head=False (melforge's model.heads = class) there is no leak_head module:
forward returns (class logits, None), as melforge has no leak parameters.

Speaker verification (issue #20), optional arguments as in
bench/cnn_stack_torch.py: input_norm (InstanceNorm1d(mels) over time before
the blocks), embedding = E > 0 (Linear(dense, E), no activation, after fc and
dropout), loss (softmax | am_softmax | aam_softmax | angleproto |
softmaxproto, margin, scale: bench/metric_losses_torch.py's module at
self.loss; no class head with am/aam/angleproto, no leak head with any metric
loss). embed(x) returns what the heads and the loss read.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from metric_losses_torch import has_class_head, make_loss


class Block(nn.Module):
    def __init__(self, cin, cout, kernel, pool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, padding=kernel // 2)
        self.pool = pool

    def forward(self, x):
        x = F.relu(self.conv(x))
        return F.max_pool2d(x, self.pool) if self.pool > 1 else x


class LeakCNN(nn.Module):
    def __init__(self, in_mels=64, in_frames=64, channels=(32, 64, 128), pools=(2, 2, 2), kernel=3,
                 dense=256, dropout=0.0, classes=2, leak_head=True, embedding=0, input_norm=False, loss="softmax",
                 margin=0.2, scale=30.0):
        super().__init__()
        if leak_head and loss != "softmax":
            raise ValueError(f"loss {loss}: the leak head goes with the softmax loss only")
        self.loss_type = loss
        self.input_norm = nn.InstanceNorm1d(in_mels, eps=1e-5) if input_norm else None
        blocks, cin, h, w = [], 1, in_mels, in_frames
        for cout, p in zip(channels, pools):
            blocks.append(Block(cin, cout, kernel, p))
            cin, h, w = cout, h // p, w // p
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(cin * h * w, dense)
        self.dropout = nn.Dropout(dropout)
        self.embedding = nn.Linear(dense, embedding) if embedding > 0 else None
        e = embedding if embedding > 0 else dense
        self.class_head = nn.Linear(e, classes) if has_class_head(loss) else None
        self.leak_head = nn.Linear(e, 1) if leak_head else None
        self.loss = make_loss(loss, e, classes, margin, scale)

    def embed(self, x):
        """The features the heads and the metric loss read: [N, E] (or [N, dense])."""
        if self.input_norm is not None:
            x = self.input_norm(x.squeeze(1)).unsqueeze(1)
        for b in self.blocks:
            x = b(x)
        h = self.dropout(F.relu(self.fc(torch.flatten(x, 1))))
        return self.embedding(h) if self.embedding is not None else h

    def forward(self, x):
        h = self.embed(x)
        leak = self.leak_head(h).squeeze(1) if self.leak_head is not None else None
        return (self.class_head(h) if self.class_head is not None else None), leak


def resolve_heads(heads, leak_in_file, class_names, normal_class=-1):
    """melforge's model.heads = auto rule (model/heads.hpp): class+leak when the
    data has a leak dataset, a class named "normal" (any case) or an explicit
    normal class; class otherwise. An explicit value is returned unchanged."""
    if heads != "auto":
        return heads
    named_normal = any(str(n).lower() == "normal" for n in class_names)
    return "class+leak" if leak_in_file or named_normal or normal_class >= 0 else "class"


def lr_at(it, lr, schedule="constant", warmup=0, total=1, min_lr=0.0):
    """melforge's schedule (kernels/adamw.hpp) at 0-based iteration `it`."""
    import math
    if it < warmup:
        return lr * (it + 1) / warmup
    span = max(1, total - warmup)
    p = min(max((it - warmup) / span, 0.0), 1.0)
    if schedule == "cosine":
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))
    if schedule == "linear":
        return lr + (min_lr - lr) * p
    return lr
