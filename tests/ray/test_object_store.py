"""Tensors from Ray's object store: zero-copy, read-only by contract, without torch's warning.

docs/decisions.md, "Tensors from read-only buffers alias them, read-only by contract": a tensor
received through ``ray.get`` is built on the object store's memory (issue 6's zero-copy get), so
an in-place write would reach the stored object; ``clone()`` gives a private copy. torch's "The
given NumPy array is not writable" warning is not raised (``tests/core/test_pickle.py`` checks
that in a fresh process: torch raises it once per process, so here it may already be spent).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import ray
import torch

from rlightning import PolicyResponse


@ray.remote
def _first_value(response: PolicyResponse) -> float:
    return float(response.value[0])


def test_a_tensor_from_the_object_store_aliases_it_and_clone_is_private(local_ray: None) -> None:
    response = PolicyResponse(
        "e0", action=np.zeros(3), value=torch.arange(100_000, dtype=torch.float32)
    )
    ref = ray.put(response)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's read-only warning included
        first, second = ray.get(ref), ray.get(ref)
    assert first.value.data_ptr() == second.value.data_ptr()  # zero-copy: the store's memory
    private = first.value.clone()
    private.add_(1)  # what a user who writes in place must do: clone first
    assert float(ray.get(_first_value.remote(ref))) == 0.0
    assert torch.equal(second.value, response.value)
    # numpy arrays are zero-copy views of the store too, read-only as numpy enforces
    assert not first.action.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        first.action[0] = 1.0
