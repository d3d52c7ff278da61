"""One step's responses read as stacked columns, in env order, for the buffer helpers.

:class:`StepColumns` reads a :class:`~rlightning.ResponseBatch` that was never split straight
from its stacked response (no per-env objects are built) and stacks per-env responses otherwise,
so :mod:`rlightning_sb3.buffers` gets ``(n_envs, ...)`` arrays and tensors either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th

from rlightning import PerEnv, PolicyResponse
from rlightning_sb3._batch import order_responses, stacked_in_order

__all__ = ["StepColumns"]


def _field(ordered: list[PolicyResponse], name: str, producer: str) -> list[Any]:
    values = []
    for response in ordered:
        fields = response.__dict__
        if name not in fields:
            raise ValueError(
                f"response for env {response.env_id!r} has no {name!r} field; the buffer helpers "
                f"need responses from {producer}"
            )
        values.append(fields[name])
    return values


class StepColumns:
    """One step's responses in env order, read field by field as stacked columns.

    Either the stacked response of a :class:`~rlightning.ResponseBatch` that was never split (its
    fields are the columns already: no per-env objects are built), or per-env responses put in
    env order by :func:`order_responses` and stacked here, as before.
    """

    def __init__(self, responses: Any, env_ids: Sequence[str] | None, producer: str) -> None:
        self.producer = producer
        self.stacked = stacked_in_order(responses, env_ids)
        if self.stacked is not None:
            self.fields: dict[str, Any] = self.stacked.__dict__
            self.ordered: list[PolicyResponse] = []
            self.ids: list[Any] = list(self.fields["env_ids"])
        else:
            self.ordered = order_responses(responses, env_ids)
            self.ids = [r.env_id for r in self.ordered]

    def _stacked_field(self, name: str) -> Any:
        if name not in self.fields:
            raise ValueError(  # no row of the batch has it; the message names the first
                f"response for env {self.ids[0]!r} has no {name!r} field (nor do the batch's "
                f"other envs); the buffer helpers need responses from {self.producer}"
            )
        return self.fields[name]

    def array(self, name: str) -> np.ndarray:
        """The field as one ``(n_envs, ...)`` array (``np.stack`` of the per-env values)."""
        if self.stacked is not None:
            fields = self.fields  # the look-up inline, without a call (every step of a loop)
            return np.asarray(fields[name] if name in fields else self._stacked_field(name))
        return np.stack(_field(self.ordered, name, self.producer))

    def tensor(self, name: str) -> th.Tensor:
        """The field as one ``(n_envs, ...)`` tensor (``torch.stack`` of the per-env values)."""
        if self.stacked is not None:
            fields = self.fields
            value = fields[name] if name in fields else self._stacked_field(name)
            if isinstance(value, th.Tensor):
                return value
            return th.stack(list(value))
        return th.stack(_field(self.ordered, name, self.producer))

    def bools(self, name: str) -> Any:
        """A per-env boolean field (``episode_start``) for :func:`per_env_bools`.

        The stacked batch of ``act`` holds it as a :class:`~rlightning.PerEnv` of Python bools
        (``act``'s checked array, ``.tolist()``): it is read as a plain list's array (numpy reads
        a list subclass several times slower than a list), a bool array when every value is a
        bool, which :func:`per_env_bools` then passes at once; any other value keeps its dtype
        for the check.
        """
        if self.stacked is not None:
            fields = self.fields
            value = fields[name] if name in fields else self._stacked_field(name)
            return np.array([*value]) if type(value) is PerEnv else value
        return _field(self.ordered, name, self.producer)

    def items(self, name: str) -> list[Any]:
        """The field as a list of ``n_envs`` per-env values."""
        if self.stacked is not None:
            return list(self._stacked_field(name))
        return _field(self.ordered, name, self.producer)

    def masks(self) -> np.ndarray | None:
        """The ``action_mask`` field as ``(n_envs, mask_dims)``, or None when no env has one.

        Raises:
            ValueError: some envs have a mask and others not.
        """
        if self.stacked is not None:
            mask = self.fields.get("action_mask")
            return None if mask is None else np.asarray(mask)
        masks = [r.__dict__.get("action_mask") for r in self.ordered]
        if all(m is None for m in masks):
            return None
        missing = [r.env_id for r, m in zip(self.ordered, masks, strict=True) if m is None]
        if missing:
            raise ValueError(
                f"responses for env(s) {missing} have no action_mask but others do; "
                "give every env a mask or none"
            )
        return np.stack([m for m in masks if m is not None])
