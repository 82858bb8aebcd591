"""Known layers written out as the functional call their ``forward`` makes.

``nn.Linear.forward`` is ``F.linear(input, self.weight, self.bias)``: a Python frame and two
``nn.Module.__getattr__`` lookups around one C call, a third of the time of a small layer's
step. When direct dispatch holds (see :mod:`flodl.graph.dispatch`), the generated forward
writes such a layer as that call itself, reading the parameters from the layer's
``_parameters`` dict and its settings (``eps``, ``approximate``, ``training``...) from the
layer, at call time: a parameter replaced or a setting changed after ``build()`` is used, exactly
as ``forward`` would use it. Each expression below is the layer's own ``forward`` in torch,
spelled out; ``tests/graph/test_inline.py`` checks each against the layer, bit for bit, values
and gradients, in training and in eval mode.

Where ``F``'s function only checks for ``__torch_function__`` overrides and forwards to a builtin
(``F.layer_norm``, ``F.batch_norm`` in eval mode, ``F.relu``, ``F.silu``), the expression calls
that builtin, with the same arguments (``torch.backends.cudnn.enabled`` read where ``F`` reads
it): the same kernel, a Python frame less. Overrides still apply (the builtins check for them
too); a ``TorchFunctionMode`` sees ``torch.layer_norm`` where the layer's ``forward`` shows it
``F.layer_norm``.

Layers whose ``forward`` is mostly bookkeeping around one kernel get a function instead of an
expression: :func:`rnn` (``nn.LSTM``/``GRU``/``RNN``: the zero state and the kernel, without
refreshing the weight list) and :func:`attention` (``nn.MultiheadAttention``: its fused fast
path, decided by the same conditions), :func:`encoder_layer` and :func:`encoder`
(``nn.TransformerEncoderLayer`` and the stack of them: the layer's fused fast path, decided by the
same conditions, and the stack's loop without its per-layer ``__call__``). Each runs ``forward``
in every case it does not cover.

A layer is written out only when its class's ``forward`` is still the one recorded here, and
was its library's own when flodl was imported: a library that replaces ``nn.Linear.forward`` on
the class (as some adapters do), before or after, gets its ``forward`` called: the direct path's
check (:func:`flodl.graph.dispatch.direct_ok`) compares each written-out class's ``forward``
with :data:`FORWARDS`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from flodl._torch_release import TORCH_RELEASE
from flodl.nn.select import Select

# The kernels ``forward`` reaches through ``torch._VF``, a module whose ``__getattr__`` (a Python
# frame, about 1.4 us) hands out these same functions: read from the class itself instead.
_VF = torch._C._VariableFunctions

# ``{m}``: the expression reaching the layer; ``{x}``: its input (a local). ``_q`` and ``_qb``
# are the generated forward's scratch locals (bound by ``:=``): the layer (for Linear, its
# parameter dict) and the layer's buffers.
# A layer with a case its expression does not cover (a padding mode other than zeros, batch
# norm in training) runs its ``forward`` in that case: ``expr if <covered> else _q.forward(x)``.
_CONV = (
    "_F.conv{d}d({{x}}, _q._parameters['weight'], _q._parameters['bias'], _q.stride, _q.padding,"
    " _q.dilation, _q.groups) if (_q := {{m}}).padding_mode == 'zeros' else _q.forward({{x}})"
)
_CONV_T = (
    "_F.conv_transpose{d}d({{x}}, _q._parameters['weight'], _q._parameters['bias'], _q.stride,"
    " _q.padding,"
    " _q.output_padding, _q.groups, _q.dilation) if (_q := {{m}}).padding_mode == 'zeros' and"
    " type(_q.padding) is tuple and type(_q.output_padding) is tuple else _q.forward({{x}})"
)
# Batch norm in eval mode with running statistics (inference); in training, or without
# statistics, its forward runs (it updates the running statistics and the batch count).
_BATCH_NORM = (
    "_torch.batch_norm({{x}}, _q._parameters['weight'], _q._parameters['bias'],"
    " _qb['running_mean'], _qb['running_var'],"
    " False, 0.0 if _q.momentum is None else _q.momentum, _q.eps, _cudnn())"
    " if not (_q := {{m}}).training"
    " and (_qb := _q._buffers)['running_mean'] is not None and _qb['running_var'] is not None"
    " and {{x}}.dim() in {dims} else _q.forward({{x}})"
)
_EXPRESSIONS: dict[type[nn.Module], str] = {
    nn.Linear: "_F.linear({x}, (_q := {m}._parameters)['weight'], _q['bias'])",
    nn.GELU: "_F.gelu({x}, approximate={m}.approximate)",
    nn.ReLU: "(_torch.relu_({x}) if {m}.inplace else _torch.relu({x}))",
    nn.SiLU: "(_nn.silu_({x}) if {m}.inplace else _nn.silu({x}))",
    nn.Tanh: "_torch.tanh({x})",
    nn.Sigmoid: "_torch.sigmoid({x})",
    nn.Identity: "{x}",
    nn.LayerNorm: (
        "_torch.layer_norm({x}, (_q := {m}).normalized_shape, _q._parameters['weight'],"
        " _q._parameters['bias'], _q.eps, _cudnn())"
    ),
    nn.Dropout: "_F.dropout({x}, (_q := {m}).p, _q.training, _q.inplace)",
    nn.Flatten: "{x}.flatten((_q := {m}).start_dim, _q.end_dim)",
    nn.Embedding: (
        "_F.embedding({x}, (_q := {m})._parameters['weight'], _q.padding_idx, _q.max_norm,"
        " _q.norm_type, _q.scale_grad_by_freq, _q.sparse)"
    ),
    nn.AdaptiveAvgPool2d: "_F.adaptive_avg_pool2d({x}, {m}.output_size)",
    nn.MaxPool2d: (
        "_F.max_pool2d({x}, (_q := {m}).kernel_size, _q.stride, _q.padding, _q.dilation,"
        " ceil_mode=_q.ceil_mode, return_indices=_q.return_indices)"
    ),
    nn.Conv1d: _CONV.format(d=1),
    nn.Conv2d: _CONV.format(d=2),
    nn.Conv3d: _CONV.format(d=3),
    nn.ConvTranspose1d: _CONV_T.format(d=1),
    nn.ConvTranspose2d: _CONV_T.format(d=2),
    nn.ConvTranspose3d: _CONV_T.format(d=3),
    nn.BatchNorm1d: _BATCH_NORM.format(dims="(2, 3)"),
    nn.BatchNorm2d: _BATCH_NORM.format(dims="(4,)"),
    nn.BatchNorm3d: _BATCH_NORM.format(dims="(5,)"),
    Select: "{x}[{m}.index]",
    nn.LSTM: "_rnn({m}, {x})",
    nn.GRU: "_rnn({m}, {x})",
    nn.RNN: "_rnn({m}, {x})",
    nn.TransformerEncoderLayer: "_encoder_layer({m}, {x})",
    nn.TransformerEncoder: "_encoder({m}, {x})",
}

# ``rnn``, ``attention``, ``encoder_layer`` and ``encoder`` (below) copy these layers'
# ``forward`` in detail (private attributes, the fast path's conditions): each group is written
# out only under a torch whose source of what it copies is one it was checked against (see
# :mod:`flodl.graph.torch_source`; read on the first graph that has such a layer).
MIRROR_GROUPS: dict[type[nn.Module], str] = {
    nn.LSTM: "rnn",
    nn.GRU: "rnn",
    nn.RNN: "rnn",
    nn.MultiheadAttention: "attention",
    nn.TransformerEncoderLayer: "encoder",
    nn.TransformerEncoder: "encoder",
}

# Recurrent cells as a scan step (``{c}``: the cell, ``{x}``: this step's input, ``{h}``: the
# carried state). The cell's own kernel on a batched input and state; any other case (the first
# step, whose state is None: the cell makes its zeros; an unbatched input) runs ``forward``,
# which also raises the cell's own errors.
_CELL = (
    "_VF.{kernel}({{x}}, {{h}}, (_q := {{c}}._parameters)['weight_ih'], _q['weight_hh'],"
    " _q['bias_ih'], _q['bias_hh']) if {{x}}.dim() == 2 and {{h}} is not None and {batched}"
    " else {{c}}.forward({{x}}, {{h}})"
)
CELLS: dict[type[nn.Module], str] = {
    nn.GRUCell: _CELL.format(kernel="gru_cell", batched="{h}.dim() == 2"),
    nn.LSTMCell: _CELL.format(
        kernel="lstm_cell",
        batched="type({h}) is tuple and len({h}) == 2 and {h}[0].dim() == 2 and {h}[1].dim() == 2",
    ),
}
"""Cells a ``scan`` step writes out: each is the kernel call the cell's ``forward`` makes."""

_WEIGHT_BIAS = (("_parameters", "weight"), ("_parameters", "bias"))
_CONVS = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)
_CELL_WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
READS: dict[type[nn.Module], tuple[tuple[str, str], ...]] = {
    nn.Linear: _WEIGHT_BIAS,
    nn.LayerNorm: _WEIGHT_BIAS,
    nn.Embedding: (("_parameters", "weight"),),
    **dict.fromkeys(_CONVS, _WEIGHT_BIAS),
    **dict.fromkeys(
        (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d),
        (*_WEIGHT_BIAS, ("_buffers", "running_mean"), ("_buffers", "running_var")),
    ),
    **dict.fromkeys(CELLS, tuple(("_parameters", name) for name in _CELL_WEIGHTS)),
}
"""The entries the written-out calls above read by key, (dict, key) for each class: each must
be there for the call to be the layer's ``forward`` (a parameter deleted and set again as a
plain tensor, as MAML-style code does, is an attribute that ``forward`` reads and the dict does
not hold: :func:`flodl.graph.dispatch.direct_ok` then falls back)."""

# Layers called with more than their input (refs: an attention's key and value), written out
# by a function of the layer and ``forward``'s own arguments (see :func:`call`).
_CALLS: dict[type[nn.Module], str] = {
    nn.MultiheadAttention: "_mha",
    nn.TransformerEncoderLayer: "_encoder_layer",
    nn.TransformerEncoder: "_encoder",
}


def _own_forward(cls: type[nn.Module]) -> bool:
    """``cls.forward`` is the one its library defines, not one patched in before flodl was
    imported (a wrapper from elsewhere, or one made with ``functools.wraps``)."""
    forward = cls.forward
    return forward.__module__ == cls.__module__ and not hasattr(forward, "__wrapped__")


FORWARDS: dict[type[nn.Module], Callable[..., Any]] = {
    t: t.forward for t in (*_EXPRESSIONS, *CELLS, *_CALLS) if _own_forward(t)
}
"""Each written-out class's ``forward`` when flodl was imported: the one its expression mirrors
(a class whose ``forward`` was already patched then is not written out)."""


# The kernel each recurrent layer's ``forward`` calls, by class and ``mode``.
_RNN_KERNELS: dict[tuple[type[nn.Module], str], Callable[..., Any]] = {
    (nn.LSTM, "LSTM"): _VF.lstm,
    (nn.GRU, "GRU"): _VF.gru,
    (nn.RNN, "RNN_TANH"): _VF.rnn_tanh,
    (nn.RNN, "RNN_RELU"): _VF.rnn_relu,
}


def rnn(module: Any, x: Any) -> Any:
    """``module.forward(x)`` for an ``nn.LSTM``/``nn.GRU``/``nn.RNN`` with no initial state: on
    a batched tensor, the zero state and the one kernel call that ``forward`` makes, without
    its bookkeeping (the weights' refresh alone costs about 10 us for two layers). Any other
    case (unbatched or packed input, a wrong size or dtype: ``forward`` raises its own error)
    runs ``forward``."""
    kernel = _RNN_KERNELS.get((type(module), module.mode))
    if (
        kernel is None
        or type(x) is not torch.Tensor
        or x.dim() != 3
        or x.size(-1) != module.input_size
    ):
        return module.forward(x)
    # forward first remakes its weight list if a weight changed since the list was made (set,
    # or swapped into ``_parameters`` as accelerate and ``functional_call`` do; on CUDA it also
    # packs them again) and passes the list as is otherwise: the kernel is called here only in
    # that second case, after forward has remade the list.
    refs, names, params = module._flat_weight_refs, module._flat_weights_names, module._parameters
    if len(refs) != len(names) or not all(
        ref is not None and ref() is params.get(name) for ref, name in zip(refs, names, strict=True)
    ):
        return module.forward(x)
    weights = module._flat_weights
    if x.dtype != weights[0].dtype and not torch._C._is_any_autocast_enabled():
        return module.forward(x)
    batch = x.size(0) if module.batch_first else x.size(1)
    layers = module.num_layers * (2 if module.bidirectional else 1)
    hidden = module.hidden_size
    h = torch.zeros(layers, batch, module.proj_size or hidden, dtype=x.dtype, device=x.device)
    state: Any = h
    if kernel is _VF.lstm:
        state = (h, torch.zeros(layers, batch, hidden, dtype=x.dtype, device=x.device))
    out = kernel(
        x,
        state,
        weights,
        module.bias,
        module.num_layers,
        module.dropout,
        module.training,
        module.bidirectional,
        module.batch_first,
    )
    return (out[0], (out[1], out[2])) if kernel is _VF.lstm else (out[0], out[1])


# torch's own tests for its attention fast path, so the written-out call decides as it does
_mha_module = nn.modules.activation
_OUT_PROJ = nn.modules.linear.NonDynamicallyQuantizableLinear
_MHA = nn.MultiheadAttention
_dispatch_modes = torch._C._len_torch_dispatch_stack


def _parameters(module: nn.Module, names: tuple[str, str], exact: bool) -> tuple[Any, Any]:
    """``module.<name>`` for both names, as ``forward`` reads them: from ``_parameters``, where
    ``nn.Module.__getattr__`` finds them, when ``exact`` (the module is of torch's own class,
    which declares no attribute of those names) and both are registered there; else as
    attributes (an adapter's property, a tensor set again after ``del``). The dict read skips
    ``__getattr__``'s Python frame, about 1 us a read."""
    params = module._parameters
    first, second = names
    if exact and first in params and second in params:
        return params[first], params[second]
    return getattr(module, first), getattr(module, second)


def _children(module: nn.Module, names: tuple[str, ...]) -> tuple[Any, ...]:
    """``module.<name>`` for each submodule name, as ``forward`` reads them: from ``_modules``,
    where ``nn.Module.__getattr__`` finds them (``module`` is of torch's own class, which
    declares no attribute of those names); as an attribute when not registered there."""
    found = module._modules
    return tuple(found[n] if n in found else getattr(module, n) for n in names)


def _on_devices(tensors: tuple[Any, ...], types: tuple[str, ...]) -> bool:
    """``all(t.device.type in types for t in tensors)`` without making a device object for a CPU
    or CUDA tensor (``types`` holds both). A missing tensor still fails on ``.device``, as the
    encoder layer's ``forward`` fails."""
    return all(
        (t is not None and (t.is_cpu or t.is_cuda)) or t.device.type in types for t in tensors
    )


def _on_fast_path_devices(tensors: tuple[Any, ...]) -> bool:
    """``all(map(_check_arg_device, tensors))`` without making a device object for a CPU or
    CUDA tensor (``is_cpu``/``is_cuda`` say what ``device.type`` would)."""
    check = _mha_module._check_arg_device
    return all(t is None or t.is_cpu or t.is_cuda or check(t) for t in tensors)


def attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    key_padding_mask: Any = None,
    need_weights: bool = True,
    attn_mask: Any = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> Any:
    """``module.forward(...)`` for an ``nn.MultiheadAttention``: self-attention without masks
    in inference (no gradient to record, batch first, packed projections) is the one fused
    kernel call that ``forward``'s fast path makes, without the 20-odd checks in Python that
    decide it (about 20 us a call); any other case runs ``forward``."""
    if (  # forward's fast-path conditions for a call without masks: settings first (cheap)
        query is key
        and key is value
        and key_padding_mask is None
        and attn_mask is None
        and not module.training
        and module.batch_first
        and module._qkv_same_embed_dim
        and module.num_heads % 2 == 0
        and module.bias_k is None
        and module.bias_v is None
        and not module.add_zero_attn
        and type(query) is torch.Tensor
        and query.dim() == 3
        and torch.backends.mha.get_fastpath_enabled()
        and not torch.is_autocast_enabled()
    ):
        # then the tensors, read as forward reads them: an adapter may wrap ``out_proj`` in a
        # module whose ``weight`` is a property over the layer it wraps
        weight, bias = _parameters(module, ("in_proj_weight", "in_proj_bias"), True)
        out_proj = module._modules.get("out_proj")
        if out_proj is None:
            out_proj = module.out_proj
        exact = type(out_proj) is _OUT_PROJ
        tensors = (
            query,
            key,
            value,
            weight,
            bias,
            *_parameters(out_proj, ("weight", "bias"), exact),
        )
        if (
            weight is not None
            and bias is not None
            and query.dtype == weight.dtype == bias.dtype
            and not torch.overrides.has_torch_function(tensors)
            and _on_fast_path_devices(tensors)
            and not (torch.is_grad_enabled() and any(map(_mha_module._arg_requires_grad, tensors)))
            and (_dispatch_modes() == 0 or not _mha_module._is_make_fx_tracing())
        ):
            return torch._native_multi_head_attention(
                query,
                key,
                value,
                module.embed_dim,
                module.num_heads,
                weight,
                bias,
                tensors[5],
                tensors[6],
                None,  # no mask, so no mask type either
                need_weights,
                average_attn_weights,
                None,
            )
    return module.forward(
        query,
        key,
        value,
        key_padding_mask,
        need_weights,
        attn_mask,
        average_attn_weights,
        is_causal,
    )


# the device types the encoder layer's fast path accepts: xpu since torch 2.10 (privateuse1's
# name is read per call: a backend may rename it)
_ENCODER_DEVICES = ("cpu", "cuda", "xpu") if TORCH_RELEASE >= (2, 10) else ("cpu", "cuda")


def _forward_hooked(module: nn.Module) -> bool:
    """A forward or forward pre-hook on ``module`` or any module inside it: the encoder layer's
    fast path is off then (the hooks of the layers it calls would not fire)."""
    pending = [module]
    while pending:
        m = pending.pop()
        if m._forward_hooks or m._forward_pre_hooks:
            return True
        pending += [child for child in m._modules.values() if child is not None]
    return False


def encoder_layer(
    module: Any,
    src: Any,
    src_mask: Any = None,
    src_key_padding_mask: Any = None,
    is_causal: bool = False,
) -> Any:
    """``module.forward(...)`` for an ``nn.TransformerEncoderLayer``: without masks, in
    inference (no gradient to record) on a batched tensor, the one fused kernel call that
    ``forward``'s fast path makes, without the 30-odd checks in Python (a walk over every
    submodule's hooks among them) that decide it, about 60 us a layer; any other case runs
    ``forward``."""
    if (  # forward's fast-path conditions for a call without masks: settings first (cheap)
        src_mask is None
        and src_key_padding_mask is None
        and not module.training
        and type(src) is torch.Tensor
        and src.dim() == 3
        and torch.backends.mha.get_fastpath_enabled()
    ):
        attn, norm1, norm2 = _children(module, ("self_attn", "norm1", "norm2"))
        in_proj = _parameters(attn, ("in_proj_weight", "in_proj_bias"), type(attn) is _MHA)
        if (
            attn.batch_first
            and in_proj[1] is not None
            and attn._qkv_same_embed_dim
            and module.activation_relu_or_gelu
            and norm1.eps == norm2.eps
            and attn.num_heads % 2 == 0
            and not torch.is_autocast_enabled()
            and not _forward_hooked(module)
        ):
            # then the tensors, read as forward reads them (see _parameters)
            linear1, linear2 = _children(module, ("linear1", "linear2"))
            (out_proj,) = _children(attn, ("out_proj",)) if type(attn) is _MHA else (attn.out_proj,)
            tensors = (
                src,
                *in_proj,
                *_parameters(out_proj, ("weight", "bias"), type(out_proj) is _OUT_PROJ),
                *_parameters(norm1, ("weight", "bias"), type(norm1) is nn.LayerNorm),
                *_parameters(norm2, ("weight", "bias"), type(norm2) is nn.LayerNorm),
                *_parameters(linear1, ("weight", "bias"), type(linear1) is nn.Linear),
                *_parameters(linear2, ("weight", "bias"), type(linear2) is nn.Linear),
            )
            devices = (
                *_ENCODER_DEVICES,
                torch.utils.backend_registration._privateuse1_backend_name,
            )
            if (
                not torch.overrides.has_torch_function(tensors)
                and _on_devices(tensors, devices)
                and not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))
            ):
                return torch._transformer_encoder_layer_fwd(
                    src,
                    attn.embed_dim,
                    attn.num_heads,
                    *tensors[1:5],
                    module.activation_relu_or_gelu == 2,
                    module.norm_first,
                    norm1.eps,
                    *tensors[5:],
                    None,  # no mask, so no mask type either
                    None,
                )
    return module.forward(src, src_mask, src_key_padding_mask, is_causal)


def _plain_call(layer: Any) -> bool:
    """``layer(...)`` would only pass on to ``layer.forward``: no hook, no ``compile()``d call
    and no ``forward`` of its own (global hooks and tracing are ruled out by the direct path's
    check, once per pass)."""
    return (
        not (
            layer._forward_hooks
            or layer._forward_pre_hooks
            or layer._backward_hooks
            or layer._backward_pre_hooks
        )
        and layer._compiled_call_impl is None
        and "forward" not in layer.__dict__
    )


def encoder(
    module: Any,
    src: Any,
    mask: Any = None,
    src_key_padding_mask: Any = None,
    is_causal: Any = None,
) -> Any:
    """``module.forward(...)`` for an ``nn.TransformerEncoder``: without masks, on a plain
    tensor, its loop over the layers, each layer that ``__call__`` would only pass on to
    ``forward`` being called as :func:`encoder_layer` (no ``__call__``, and its fast path
    decided without ``forward``'s checks), then the final norm; any other case (a mask, where
    ``forward`` may pack the batch into a nested tensor) runs ``forward``."""
    layers = module.layers
    if (
        mask is None
        and src_key_padding_mask is None
        and (is_causal is None or is_causal is False)  # no causal mask to detect, or make
        and type(src) is torch.Tensor
        and src.dim() in (2, 3)  # forward reads the sequence length from these
        and len(layers) > 0
        and all(type(layer) is nn.TransformerEncoderLayer for layer in layers)
        # the layers' class forward is still the one encoder_layer mirrors
        and nn.TransformerEncoderLayer.forward is FORWARDS.get(nn.TransformerEncoderLayer)
    ):
        out = src
        for layer in layers:
            if _plain_call(layer):
                out = encoder_layer(layer, out)
            else:
                out = layer(out, src_mask=None, is_causal=False, src_key_padding_mask=None)
        norm = module.norm
        return out if norm is None else norm(out)
    return module.forward(src, mask, src_key_padding_mask, is_causal)


def call(module: nn.Module, positional: int, keywords: list[str]) -> str | None:
    """The function that writes out ``module.forward`` called with ``positional`` arguments and
    ``keywords``, if ``module``'s class is one written out and the call binds to its
    ``forward`` (else the call is left to ``forward``, which raises its own error)."""
    name = _template(_CALLS, module)
    if name is None:
        return None
    try:
        inspect.signature(FORWARDS[type(module)]).bind(
            module, *range(positional), **dict.fromkeys(keywords)
        )
    except TypeError:
        return None
    return name


NAMES: dict[str, Any] = {
    "_F": functional,
    "_VF": _VF,
    "_nn": torch._C._nn,
    "_cudnn": torch._C._get_cudnn_enabled,
    "_rnn": rnn,
    "_mha": attention,
    "_encoder_layer": encoder_layer,
    "_encoder": encoder,
}
"""What the expressions use besides ``_torch`` (already in every generated forward)."""


def expression(module: nn.Module, reach: str, x: str) -> str | None:
    """The functional call that ``module.forward(x)`` makes, ``module`` being reached by the
    source expression ``reach``; None when its class is not one written out here."""
    template = _template(_EXPRESSIONS, module)
    return None if template is None else template.format(m=reach, x=x)


def cell_step(module: nn.Module) -> str | None:
    """One scan step of ``module`` (a recurrent cell) written out as its kernel call, a
    template over the locals ``{c}`` (the cell), ``{x}`` (the step's input) and ``{h}`` (the
    carried state); None when its class is not one written out here."""
    return _template(CELLS, module)


def _template(table: dict[type[nn.Module], str], module: nn.Module) -> str | None:
    """``module``'s class's entry in ``table``, if that class's ``forward`` is still the one
    the entry mirrors (see :data:`FORWARDS`) and, for the detailed mirrors, this torch's source
    is one they were checked against."""
    cls = type(module)
    template = table.get(cls)
    if template is None or cls.forward is not FORWARDS.get(cls) or not checked(cls):
        return None
    return template


def checked(cls: type[nn.Module]) -> bool:
    """Whether ``cls``'s write-out is on under this torch: always, but for the detailed mirrors
    (:data:`MIRROR_GROUPS`), on only when this torch's source of what they copy is one they
    were checked against."""
    group = MIRROR_GROUPS.get(cls)
    if group is None:
        return True
    # imported here, not with flodl: so that ``python -m flodl.graph.torch_source`` runs a
    # module not imported yet
    from flodl.graph import torch_source

    return torch_source.mirrored(group)
