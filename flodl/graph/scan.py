"""The ``scan`` node: a cell run once per step of a sequence dimension, carrying its state.

``FlowBuilder.scan(cell, dim=1)`` describes the loop every ``nn.LSTMCell``/``nn.GRUCell`` script
writes by hand::

    state = None                                  # or a given initial state
    outputs = []
    for x_t in x.unbind(dim):
        state = cell(x_t, state)                  # LSTMCell: (h, c); GRUCell: h
        outputs.append(state[0] if isinstance(state, tuple) else state)
    y = torch.stack(outputs, dim)

and :func:`emit_scan` writes exactly that into the graph's generated ``forward``, so the result
and its gradients equal the hand-written loop's bit for bit. ``state=None`` lets the cell start
from its own default (torch's cells use zeros, the same values as an explicit ``torch.zeros``).
The final state is the value of the companion ``scan_state`` node (tagged by ``final=...``).

With ``keep="last"`` nothing is collected: the loop only carries the state, and the node's value
is the last step's output (``state[0]`` for an LSTMCell), as a model that reads only its final
hidden state is written by hand.
"""

from __future__ import annotations

from collections.abc import Callable


def state_local(node_id: str) -> str:
    """The local variable holding a scan node's carried state in the generated forward."""
    return f"_h_{node_id}"


def emit_scan(
    emit: Callable[..., None],
    node_id: str,
    own: str,
    primary: str,
    dim: int,
    initial: str,
    out: str,
    depth: int,
    keep: str = "all",
    step: str | None = None,
) -> None:
    """Write the scan loop for node ``node_id`` (module expression ``own``) into ``emit``;
    ``step`` is one step's call, a template over the cell ``{c}``, input ``{x}``, state ``{h}``
    (default: calling the cell, ``{c}({x}, {h})``)."""
    cell, h, outs, x = f"_c_{node_id}", state_local(node_id), f"_o_{node_id}", f"_x_{node_id}"
    call = (step or "{c}({x}, {h})").format(c=cell, x=x, h=h)
    emit(f"{cell} = {own}", depth, node_id)
    emit(f"{h} = {initial}", depth, node_id, "initial state")
    if keep == "last":
        emit(f"for {x} in {primary}.unbind({int(dim)}):", depth, node_id)
        emit(f"{h} = {call}", depth + 1, node_id, "a step of the scan")
        emit(f"{out} = {h}[0] if isinstance({h}, tuple) else {h}", depth, node_id, "last output")
        return
    emit(f"{outs} = []", depth, node_id)
    emit(f"for {x} in {primary}.unbind({int(dim)}):", depth, node_id)
    emit(f"{h} = {call}", depth + 1, node_id, "a step of the scan")
    emit(f"{outs}.append({h}[0] if isinstance({h}, tuple) else {h})", depth + 1, node_id)
    emit(f"{out} = _torch.stack({outs}, {int(dim)})", depth, node_id, "stacking the outputs")
