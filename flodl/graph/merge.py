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

    KINDS: ClassVar[tuple[str, ...]] = ("add", "mean", "mul", "cat")
    ADD: ClassVar[MergeOp]
    MEAN: ClassVar[MergeOp]
    MUL: ClassVar[MergeOp]

    def __post_init__(self) -> None:
        # The op becomes generated source (``expression``): only known kinds and a plain int.
        if self.kind not in self.KINDS:
            raise ValueError(
                f"unknown merge op {self.kind!r}; use MergeOp.ADD, MEAN, MUL or CAT(dim)"
            )
        if self.kind == "cat":
            if not isinstance(self.dim, int) or isinstance(self.dim, bool):
                raise TypeError(
                    f"MergeOp.CAT(dim): dim must be an int, got {type(self.dim).__name__}"
                )
            object.__setattr__(self, "dim", int(self.dim))
        elif self.dim is not None:
            raise ValueError(f"MergeOp.{self.kind.upper()} takes no dim")

    @staticmethod
    def CAT(dim: int = -1) -> MergeOp:
        """Concatenate the branches along ``dim``."""
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
