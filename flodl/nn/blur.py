"""``GaussianBlur``: :func:`flodl.nn.functional.gaussian_blur_2d` as a parameter-free module."""

from __future__ import annotations

import torch
from torch import nn

from flodl.nn.functional import _check_sigma, gaussian_blur_2d, gaussian_kernel_size

__all__ = ["GaussianBlur"]


class GaussianBlur(nn.Module):
    """Blur ``[B, C, H, W]`` inputs with a Gaussian of standard deviation ``sigma`` (pixels).

    Stateless: no parameters, no buffers. The kernel size is ``2 * ceil(3 * sigma) + 1``
    (OpenCV's default), padding is zeros, and the output has the input's shape.

    >>> import torch
    >>> blur = GaussianBlur(1.5)
    >>> blur, blur(torch.rand(2, 3, 16, 16)).shape
    (GaussianBlur(sigma=1.5, kernel_size=11), torch.Size([2, 3, 16, 16]))
    """

    def __init__(self, sigma: float) -> None:
        super().__init__()
        self.sigma = _check_sigma(sigma, "GaussianBlur")

    @property
    def kernel_size(self) -> int:
        return gaussian_kernel_size(self.sigma)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gaussian_blur_2d(x, self.sigma)

    def extra_repr(self) -> str:
        return f"sigma={self.sigma}, kernel_size={self.kernel_size}"
