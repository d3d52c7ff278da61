"""The only place where rlightning touches torch, always lazily.

torch is an optional dependency of ``rlightning-core``. No tensor can exist unless torch has
been imported by someone, so "is this a tensor?" is answered by first looking for ``torch`` in
:data:`sys.modules` and never by importing it. Functions that really need torch (``cuda()``,
decoding a tensor) call :func:`require_torch`, which imports it or raises an ImportError that
names the extra to install.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

__all__ = [
    "NUMPY_UNSUPPORTED_DTYPES",
    "require_torch",
    "tensor_type",
    "torch_if_imported",
]

_TORCH_EXTRA_HINT = "install it with `pip install rlightning-core[torch]` (or any torch>=2.1 build)"


def torch_if_imported() -> ModuleType | None:
    """Return the ``torch`` module if it is already imported, else None (never imports it).

    Returns:
        The module object from :data:`sys.modules`, or None when torch has not been imported in
        this process, in which case no ``torch.Tensor`` can exist.
    """
    return sys.modules.get("torch")


def tensor_type() -> type[Any] | None:
    """Return ``torch.Tensor`` if torch is imported, else None (never imports torch).

    Returns:
        The ``torch.Tensor`` class, or None when torch has not been imported.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    # A partially initialised torch (import in progress) may lack Tensor yet.
    return getattr(torch, "Tensor", None)


def require_torch(purpose: str) -> ModuleType:
    """Import torch, or fail with an error that says what needs it and how to install it.

    Args:
        purpose: What needs torch, used in the message, e.g. ``"cuda()"``.

    Returns:
        The ``torch`` module.

    Raises:
        ImportError: torch is not installed.
    """
    loaded = sys.modules.get("torch")
    if loaded is not None:
        return loaded
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs torch, which is not installed: {_TORCH_EXTRA_HINT}"
        ) from exc
    return torch


def _numpy_unsupported_dtypes() -> frozenset[Any]:
    torch = torch_if_imported()
    if torch is None:
        return frozenset()
    names = (
        "bfloat16",
        "complex32",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn_x2",
    )
    return frozenset(getattr(torch, name) for name in names if hasattr(torch, name))


class _LazyDtypeSet:
    """Set of torch dtypes that numpy cannot represent, built on first use."""

    __slots__ = ("_dtypes",)

    def __init__(self) -> None:
        self._dtypes: frozenset[Any] | None = None

    def __contains__(self, dtype: object) -> bool:
        dtypes = self._dtypes
        if dtypes is None:
            dtypes = self._dtypes = _numpy_unsupported_dtypes()
        return dtype in dtypes


#: Torch dtypes without a numpy equivalent (bfloat16, complex32, the float8 family, ...).
#: ``numpy()`` converts floating ones to float32 and complex32 to complex64.
NUMPY_UNSUPPORTED_DTYPES = _LazyDtypeSet()
