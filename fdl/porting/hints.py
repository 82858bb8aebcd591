"""What ``fdl check`` says when a script reaches for a name flodl does not have.

Three kinds of help: a PyTorch name written under ``fl.`` stays PyTorch (the hint gives the
torch path); a torch scheduler maps to one of flodl's pure schedules; Rust-isms the original
flodl's docs may have taught (``?``, ``::``, ``let``) get a one-line explanation. And the
defaults of flodl's replacements that differ from the torch idiom they replace.
"""

from __future__ import annotations

import re

_LAYER = "torch.nn.{name} (layers stay PyTorch)"
PYTORCH_HINTS = {
    **{
        name: _LAYER.format(name=name)
        for name in (
            "Linear",
            "Conv1d",
            "Conv2d",
            "Conv3d",
            "ConvTranspose2d",
            "BatchNorm1d",
            "BatchNorm2d",
            "LayerNorm",
            "GroupNorm",
            "Dropout",
            "ReLU",
            "LeakyReLU",
            "GELU",
            "SiLU",
            "Tanh",
            "Sigmoid",
            "Softmax",
            "Embedding",
            "LSTM",
            "LSTMCell",
            "GRU",
            "GRUCell",
            "MultiheadAttention",
            "TransformerEncoderLayer",
            "MaxPool2d",
            "AvgPool2d",
            "AdaptiveAvgPool2d",
            "Flatten",
            "Identity",
            "ModuleList",
            "ModuleDict",
        )
    },
    **{
        name: f"torch.nn.{name} (losses stay PyTorch)"
        for name in ("CrossEntropyLoss", "MSELoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss")
    },
    "Sequential": "fl.FlowBuilder(first).through(...).build() (or keep torch.nn.Sequential)",
    "Module": "torch.nn.Module (a built fl.Graph is one)",
    "DataParallel": "fl.Trainer (one process per device)",
    "DistributedDataParallel": "fl.Trainer (it joins torchrun's group)",
    "DistributedSampler": "fl.Trainer / fl.data.DataLoader (they partition across ranks)",
    "SummaryWriter": "fl.Monitor",
    "save": "graph.save_checkpoint(path) / fl.save_checkpoint",
    "load": "graph.load_checkpoint(path) / fl.load_checkpoint",
    "no_grad": "torch.no_grad (unchanged)",
    "autocast": "torch.autocast (unchanged)",
    "LBFGS": "torch.optim.LBFGS (optimizers flodl does not wrap stay PyTorch)",
    "RMSprop": "torch.optim.RMSprop (optimizers flodl does not wrap stay PyTorch)",
    "Adagrad": "torch.optim.Adagrad (optimizers flodl does not wrap stay PyTorch)",
}

# torch.optim.lr_scheduler class -> (flodl's pure schedule, how to call it)
SCHEDULER_HINTS = {
    "StepLR": ("flodl.optim.StepDecay", "StepDecay(base_lr, step_size, gamma)"),
    "MultiStepLR": ("flodl.optim.MultiStepLR", "MultiStepLR(base_lr, milestones, gamma)"),
    "ExponentialLR": ("flodl.optim.ExponentialLR", "ExponentialLR(base_lr, gamma)"),
    "CosineAnnealingLR": (
        "flodl.optim.CosineScheduler",
        "CosineScheduler(base_lr, min_lr=eta_min, total_steps=T_max)",
    ),
    "OneCycleLR": ("flodl.optim.OneCycleLR", "OneCycleLR(max_lr, total_steps, warmup_frac)"),
    "ReduceLROnPlateau": (
        "flodl.optim.PlateauScheduler",
        "PlateauScheduler(base_lr, patience, factor, min_lr); call .observe(metric)",
    ),
    "CyclicLR": ("flodl.optim.CyclicLR", "CyclicLR(...)"),
    "LinearLR": ("flodl.optim.WarmupScheduler", "a linear warmup wrapping another schedule"),
}

# torch.nn.functional names people write as fl.nn.functional.X (flodl's adds only its own)
_TORCH_FUNCTIONAL = frozenset(
    {
        "relu",
        "gelu",
        "silu",
        "elu",
        "leaky_relu",
        "sigmoid",
        "tanh",
        "softmax",
        "log_softmax",
        "dropout",
        "linear",
        "conv1d",
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "adaptive_avg_pool2d",
        "pad",
        "interpolate",
        "normalize",
        "one_hot",
        "layer_norm",
        "batch_norm",
        "embedding",
        "cosine_similarity",
        "scaled_dot_product_attention",
        "cross_entropy",
        "kl_div",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
    }
)


def pytorch_function_hint(module: str, name: str) -> str | None:
    """``torch.nn.functional.X`` for a torch function written under flodl's functional module."""
    if not module.endswith("nn.functional"):
        return None
    if name in _TORCH_FUNCTIONAL or name.endswith("_loss"):
        what = (
            "losses stay PyTorch" if "loss" in name or name in {"cross_entropy", "kl_div"} else ""
        )
        return f"torch.nn.functional.{name}" + (f" ({what})" if what else "")
    return None


def syntax_hint(message: str, line: str) -> str:
    """One line explaining a Rust-ism or a misplaced ``__future__`` import ("" if none)."""
    code = line.split("#", 1)[0]
    if "from __future__" in message or "__future__" in code:
        return (
            " — `from __future__ import ...` must be the first statement (only the docstring "
            "and comments may come before it): move it to the top"
        )
    if re.search(r"[\w)\]]\?", code):
        return (
            " — `?` is Rust's error propagation; Python raises exceptions on its own: drop the "
            "`?` (`model = builder.build()`)"
        )
    if "::" in code:
        return " — `::` is Rust's path separator; Python uses `.` (`fl::FlowBuilder` -> `fl.FlowBuilder`)"
    if re.match(r"\s*let\s+(mut\s+)?\w+", code):
        return " — Python has no `let`: assign with `name = value`"
    return ""


# (class, setter) -> (warning, suggestion) when a builder chain never calls the setter
BEHAVIOUR_DEFAULTS = {
    ("flodl.data.loader.DataLoaderBuilder", "drop_last"): (
        "fl.data.DataLoader drops the last partial batch by default (torch's DataLoader keeps "
        "it): an evaluation set smaller than a batch yields no batch at all",
        "`.drop_last(False)` to keep it like torch (or `.drop_last(True)` to say you mean it)",
    ),
    ("flodl.data.loader.DataLoaderBuilder", "shuffle"): (
        "fl.data.DataLoader shuffles by default (torch's DataLoader does not)",
        "`.shuffle(False)` for an evaluation loader (or `.shuffle(True)` to say you mean it)",
    ),
}
