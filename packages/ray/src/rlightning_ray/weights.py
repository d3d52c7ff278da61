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
    and, for the local mode, :func:`rlightning_ray.start_runners` do). The driver owns the
    weights' objects, so they outlive a crashed server or runner.

    A local-mode :class:`~rlightning_ray.Collector` *claims* its runners' registry when it is
    built (:meth:`claim`): from then on only it publishes there (:meth:`publish` with its
    ``owner`` token), so the version it hands its runners with each ``sample`` is always the
    newest, and they need not read the registry before every fragment. A newer Collector over
    the same runners claims it in turn; the older one's publishes are refused.
    """

    def __init__(self) -> None:
        self._latest: tuple[int, list[Any]] | None = None
        self._owner: str | None = None

    def claim(self, owner: str) -> tuple[int, list[Any]] | None:
        """Make ``owner`` (a Collector's token) the only publisher; return the newest weights.

        Returns:
            The newest ``(version, [ObjectRef])``, or None before the first publish.
        """
        self._owner = owner
        return self._latest

    def owner(self) -> str | None:
        """The token of the Collector that claimed the registry last (None: unclaimed)."""
        return self._owner

    def publish(self, version: int, refs: list[Any], owner: str | None = None) -> int:
        """Remember ``refs`` (a one-item list holding the weights' ObjectRef) as ``version``.

        Args:
            version: The new version, newer than the one remembered.
            refs: ``[ObjectRef]`` of the weights.
            owner: The publishing Collector's token (None: a publish from outside a Collector,
                e.g. :func:`publish_weights`).

        Returns:
            ``version``.

        Raises:
            ValueError: ``version`` is not newer than the one remembered, or a Collector
                claimed the registry and ``owner`` is not its token (publish through the
                newest Collector built over the runners).
        """
        if self._owner is not None and owner != self._owner:
            who = "a publish from outside a Collector" if owner is None else "an older Collector"
            raise ValueError(
                f"weights version {version} refused: the runners' weights registry is claimed "
                f"by the newest Collector built over them, and this is {who}; publish with that "
                "Collector's publish(version, weights) (its runners load only what it hands "
                "them)"
            )
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
