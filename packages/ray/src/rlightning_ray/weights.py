"""Weights through Ray's object store: published once, switched by the server between batches.

The learner calls :func:`publish_weights` with a new version number and the weights (e.g. an SB3
policy's ``state_dict``): they are put in the object store once (``ray.put``), and the server and
a :class:`WeightsRegistry` get a reference to that one object. The server keeps the reference
until its next batch and switches to the new weights before that batch's forward pass, never
inside one. A server Ray restarts after a crash reads the newest weights from the registry in its
constructor, so it resumes with what the learner last published.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WeightsRegistry", "publish_weights"]


class WeightsRegistry:
    """A Ray actor remembering the newest published weights (a reference, not a copy).

    Create it with ``ray.remote(WeightsRegistry).remote()`` (:func:`rlightning_ray.start_server`
    does). The driver owns the weights' objects, so they outlive a crashed server.
    """

    def __init__(self) -> None:
        self._latest: tuple[int, list[Any]] | None = None

    def publish(self, version: int, refs: list[Any]) -> int:
        """Remember ``refs`` (a one-item list holding the weights' ObjectRef) as ``version``.

        Returns:
            ``version``.

        Raises:
            ValueError: ``version`` is not newer than the one remembered.
        """
        if self._latest is not None and version <= self._latest[0]:
            raise ValueError(
                f"weights version {version} is not newer than the published {self._latest[0]}"
            )
        self._latest = (version, refs)
        return version

    def latest(self) -> tuple[int, list[Any]] | None:
        """The newest ``(version, [ObjectRef])``, or None before the first publish."""
        return self._latest


def publish_weights(server: Any, registry: Any, version: int, weights: Any) -> int:
    """Publish ``weights`` as ``version`` to the server (and its registry), once.

    Blocks until both acknowledged; the server uses the weights from its next batch on.

    Args:
        server: The :class:`~rlightning_ray.PolicyServer` actor handle.
        registry: The :class:`WeightsRegistry` actor handle (None: no restart recovery).
        version: A new int version, larger than every earlier one.
        weights: What the server's policy's ``set_weights`` takes (for SB3:
            :func:`rlightning_ray.sb3.policy_weights`).

    Returns:
        ``version``.

    Raises:
        TypeError: ``version`` is not an int.
        ValueError: ``version`` is not newer than the last published (from the registry).
    """
    import ray

    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"version must be an int, got {type(version).__name__} {version!r}")
    ref = ray.put(weights)
    if registry is not None:  # first: it refuses a version that is not newer
        ray.get(registry.publish.remote(version, [ref]))
    ray.get(server.set_weights.remote(version, [ref]))
    return version
