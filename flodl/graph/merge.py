"""How ``merge`` combines parallel branches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class MergeOp:
    """A merge operation: ``MergeOp.ADD``, ``MergeOp.MEAN``, ``MergeOp.MUL`` or ``MergeOp.CAT(dim)``.

    >>> import flodl as fl
    >>> fl.MergeOp.CAT(1)
    MergeOp.CAT(1)
    """

    kind: str
    dim: int | None = None

    ADD: ClassVar[MergeOp]
    MEAN: ClassVar[MergeOp]
    MUL: ClassVar[MergeOp]

    @staticmethod
    def CAT(dim: int = -1) -> MergeOp:
        """Concatenate the branches along ``dim``."""
        if not isinstance(dim, int):
            raise TypeError(f"MergeOp.CAT(dim): dim must be an int, got {type(dim).__name__}")
        return MergeOp("cat", dim)

    def __repr__(self) -> str:
        if self.kind == "cat":
            return f"MergeOp.CAT({self.dim})"
        return f"MergeOp.{self.kind.upper()}"

    def expression(self, operands: list[str]) -> str:
        """Python source combining the operand variables (used by the code generator)."""
        if self.kind == "add":
            return " + ".join(operands)
        if self.kind == "mean":
            return f"({' + '.join(operands)}) / {len(operands)}"
        if self.kind == "mul":
            return " * ".join(operands)
        return f"_torch.cat(({', '.join(operands)},), {self.dim})"


MergeOp.ADD = MergeOp("add")
MergeOp.MEAN = MergeOp("mean")
MergeOp.MUL = MergeOp("mul")
