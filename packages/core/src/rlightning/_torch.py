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
    "TENSOR",
    "cuda_device",
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


#: ``torch.Tensor`` once it has been seen in an imported torch; None until then.
TENSOR: type[Any] | None = None


def tensor_type() -> type[Any] | None:
    """Return ``torch.Tensor`` if torch is imported, else None (never imports torch).

    The class is cached in :data:`TENSOR` the first time it is found, so later calls cost one
    global lookup.

    Returns:
        The ``torch.Tensor`` class, or None when torch has not been imported.
    """
    global TENSOR  # a write-once cache of torch.Tensor
    if TENSOR is not None:
        return TENSOR
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    # A partially initialised torch (import in progress) may lack Tensor yet: not cached then.
    TENSOR = getattr(torch, "Tensor", None)
    return TENSOR


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


def cuda_device(owner: str, device: str | int | None) -> Any:
    """Resolve the ``device`` argument of ``<owner>.cuda()`` to a CUDA ``torch.device``.

    Args:
        owner: The class name, for the messages (e.g. ``"PolicyResponse"``).
        device: CUDA device index or string; None means ``'cuda'`` (the current device).

    Returns:
        The ``torch.device``, of type ``"cuda"``.

    Raises:
        ImportError: torch is not installed (torch with CUDA support is needed).
        RuntimeError: torch has no usable CUDA device.
        ValueError: ``device`` names a device that is not CUDA.
    """
    torch = require_torch(f"{owner}.cuda() (torch with CUDA support)")
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{owner}.cuda() needs torch with CUDA and a visible GPU, but "
            f"torch {torch.__version__} reports torch.cuda.is_available() == False"
        )
    if device is None:
        target = torch.device("cuda")
    elif isinstance(device, int) and not isinstance(device, bool):
        target = torch.device("cuda", device)
    else:
        target = torch.device(device)
    if target.type != "cuda":
        raise ValueError(f"cuda() takes a CUDA device, got device={device!r}; use to()")
    return target


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
    )
    return frozenset(getattr(torch, name) for name in names if hasattr(torch, name))


class _LazyDtypeSet:
    """Set of torch dtypes that numpy cannot represent, built on first use."""

    __slots__ = ("_dtypes",)

    def __init__(self) -> None:
        self._dtypes: frozenset[Any] | None = None

    def __contains__(self, dtype: object) -> bool:
        return dtype in self.frozen()

    def frozen(self) -> frozenset[Any]:
        """Return the set as a plain frozenset (for hot loops: ``in`` on it costs no call).

        Returns:
            The dtypes; empty (and not cached) while torch is not imported.
        """
        dtypes = self._dtypes
        if dtypes is None:
            dtypes = _numpy_unsupported_dtypes()
            if torch_if_imported() is not None:
                self._dtypes = dtypes
        return dtypes


#: Torch dtypes without a numpy equivalent (bfloat16, complex32, the float8 family, ...).
#: ``numpy()`` converts floating ones to float32 and complex32 to complex64.
NUMPY_UNSUPPORTED_DTYPES = _LazyDtypeSet()
