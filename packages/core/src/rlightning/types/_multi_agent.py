"""``MultiAgentPolicyResponse``: per-agent actions keyed by agent id (private module).

The class is defined here, to keep :mod:`rlightning.types.policy_response` near the house size,
and *presented* as that module's: ``__module__`` of the class and of every function in its body is
``"rlightning.types.policy_response"``, where it is re-exported. So pickles and the wire format,
which record the class path, doctest (which looks for examples under that module) and the API page
see it exactly where it was before it moved. The same pattern as ``rlightning.wire``'s errors, and
as httpx presents the classes of its private modules under ``httpx``.

Import it from :mod:`rlightning` or :mod:`rlightning.types.policy_response`, never from here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

import gymnasium as gym

from rlightning._fields import _check_env_id, _check_space
from rlightning._tree import tree_equal, tree_repr
from rlightning.rules import (
    SHARED_FIELDS,
    STAMP_FIELDS,
    check_env_id_matches,
    check_per_agent_field,
    check_per_agent_keys,
)
from rlightning.types.policy_response import PolicyResponse

__all__ = ["MultiAgentPolicyResponse"]

_C = TypeVar("_C", bound=type[Any])


class _Required:
    """The default of ``action`` in the signature: not given (None is a value one may pass)."""

    __slots__ = ()

    def __repr__(self) -> str:  # what the signature shows in help() and the API page
        return "<required>"


_MISSING: Any = _Required()


def _presented_in(module: str) -> Callable[[_C], _C]:
    """Class decorator: set ``__module__`` of the class and of the functions in its body."""

    def present(cls: _C) -> _C:
        cls.__module__ = module
        for member in vars(cls).values():
            func = member.fget if isinstance(member, property) else member
            func = getattr(func, "__func__", func)  # staticmethod, classmethod
            if inspect.isfunction(func):
                func.__module__ = module
        return cls

    return present


@_presented_in("rlightning.types.policy_response")
class MultiAgentPolicyResponse(PolicyResponse):
    """Policy response for multi-agent interactions.

    Extends PolicyResponse with support for multiple agents, where actions are stored in a
    dictionary keyed by agent ID (the PettingZoo convention: ``{agent_id: action}``).

    Per-agent fields: a field is per-agent when it is a dict whose keys are exactly the agent ids
    of ``action`` (e.g. ``log_prob={"a": ..., "b": ...}``). Every other field is shared by all
    agents. :meth:`for_agent` and :meth:`from_agents` rely on that one rule. A dict field whose
    keys are all agent ids but not every agent's (``log_prob={"a": -0.1}`` beside
    ``action={"a": 0, "b": 1}``) looks per-agent but would be read as shared, handing agent
    ``"b"`` agent ``"a"``'s entry; it is refused (``ValueError`` naming the field and the missing
    agents): give every agent an entry, None for an agent that has none. A dict with a key that
    is not an agent id (``info={"team": "red"}``) is shared; so is an empty dict.

    Args:
        env_id: Environment identifier, a str or None.
        action: The per-agent actions, a dict keyed by agent id (required, by keyword). It is
            stored right after ``env_id`` wherever it stands among the keywords, so
            ``to_dict()``, ``repr`` and iteration list it first.
        **data: The other response fields, in the order given.

    Raises:
        TypeError: ``action`` is missing or not a dict, or ``env_id`` is not a str or None;
            also at class creation, for a subclass that defines a member named ``action``.
        ValueError: a field name would shadow a member of the class; or a dict field's keys are
            agent ids of ``action`` but not all of them (the field and the missing agents named).
            Setting a field (or ``action``) later checks the same rule.

    Examples:
        >>> actions, values = {"a": 0, "b": 1}, {"a": 0.1, "b": 0.2}
        >>> r = MultiAgentPolicyResponse("env-0", action=actions, value=values)
        >>> r.agent_ids
        ['a', 'b']
        >>> r.for_agent("b")
        PolicyResponse(env_id='env-0', action=1, value=0.2)
        >>> partial = MultiAgentPolicyResponse("env-0", action=actions, value={"a": 0.1, "b": None})
        >>> partial.for_agent("b")
        PolicyResponse(env_id='env-0', action=1, value=None)
    """

    _undeletable_fields: ClassVar[frozenset[str]] = frozenset({"env_id", "action"})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "action" in cls._reserved_fields:
            # __init__'s fast path takes a lone ``action`` field as never reserved.
            raise TypeError(
                f"{cls.__name__} defines a member named 'action', which would shadow the "
                f"per-agent actions every {MultiAgentPolicyResponse.__name__} holds; rename it"
            )

    def __init__(self, /, env_id: str | None, *, action: Any = _MISSING, **data: Any) -> None:
        # PolicyResponse.__init__'s body, inline: super().__init__(env_id, **data) would pack
        # the keyword arguments into a new dict once more. ``action`` is a keyword parameter of
        # its own, so CPython binds it without going through ``data``. Fast path: ``action`` is
        # a dict and there is no other field. ``action`` is never a reserved name
        # (__init_subclass__ sees to it) and no other dict can be a partial per-agent field, so
        # only env_id is left to check.
        fields = self.__dict__  # empty unless a subclass's __init__ set fields before this
        if type(action) is not dict or data or fields:
            self._check_fields(env_id, action, data)
        elif type(env_id) is not str and env_id is not None:
            _check_env_id(env_id)
        fields["env_id"] = env_id
        fields["action"] = action
        if data:
            fields |= data

    def _check_fields(self, env_id: str | None, action: Any, data: dict[str, Any]) -> None:
        """``__init__``'s checks beyond a lone dict ``action``; raises as the class documents."""
        if type(action) is not dict:
            _check_agent_actions(action)  # raises unless a dict subclass
        if env_id is not None and type(env_id) is not str:
            _check_env_id(env_id)
        if not type(self)._reserved_fields.isdisjoint(data):
            self._refuse_reserved(data)
        agents = action.keys()
        # Rule per-agent-keys (rlightning.rules.check_per_agent_keys): the fields given, and any
        # a subclass's __init__ set before calling this one (they passed __setattr__ before
        # there was an action to hold them against).
        if data:
            check_per_agent_keys(data, agents)
        if self.__dict__:
            check_per_agent_keys(self.__dict__, agents)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "action":
            _check_agent_actions(value)
            check_per_agent_keys(self.__dict__, value.keys(), setting_action=True)
        elif isinstance(value, dict) and "action" in self.__dict__:
            check_per_agent_field(name, value, self.__dict__["action"].keys())
        super().__setattr__(name, value)

    @property
    def agent_ids(self) -> list[Any]:
        """The agent ids, in the order of ``action``'s keys."""
        return list(self.__dict__["action"])

    def is_per_agent(self, name: str) -> bool:
        """Tell whether field ``name`` is per-agent (a dict keyed by exactly the agent ids).

        Args:
            name: A field name.

        Returns:
            True for per-agent fields (``action`` always is), False for shared ones.

        Raises:
            KeyError: there is no field ``name``.
        """
        fields = self.__dict__
        if name not in fields:
            raise KeyError(f"{type(self).__name__} has no field {name!r}; fields: {list(fields)}")
        value = fields[name]
        return isinstance(value, dict) and value.keys() == fields["action"].keys()

    def for_agent(self, agent_id: Any) -> PolicyResponse:
        """Return one agent's single-agent view.

        Args:
            agent_id: One of :attr:`agent_ids`.

        Returns:
            A new :class:`PolicyResponse` with the same ``env_id``, that agent's entry of every
            per-agent field, and every shared field as is (the same objects, not copies).

        Raises:
            TypeError: ``agent_id`` is unhashable.
            KeyError: ``agent_id`` is not one of the agents.
        """
        fields = self.__dict__
        agents = fields["action"]
        try:
            known = agent_id in agents
        except TypeError:  # unhashable
            raise TypeError(
                f"agent_id must be hashable like the agent ids {list(agents)}, "
                f"got {type(agent_id).__name__} {agent_id!r}"
            ) from None
        if not known:
            raise KeyError(
                f"agent {agent_id!r} has no action in this response; agents: {list(agents)}"
            )
        keys = agents.keys()
        out: dict[str, Any] = {}
        for name, value in fields.items():
            if name == "env_id":
                continue
            if isinstance(value, dict) and value.keys() == keys:
                out[name] = value[agent_id]
            else:
                out[name] = value
        return PolicyResponse(fields["env_id"], **out)

    @classmethod
    def from_agents(
        cls,
        env_id: str | None,
        responses: Mapping[Any, PolicyResponse],
        shared: Iterable[str] = (),
    ) -> MultiAgentPolicyResponse:
        """Build a multi-agent response from one single-agent response per agent.

        The inverse of :meth:`for_agent`. Every field becomes a per-agent dict keyed by agent id
        (in the order of ``responses``), except the fields named in ``shared`` and those one
        value per response describes (``rlightning.rules.SHARED_FIELDS``: the timing stamps
        ``ts_env_sent_ns``, ``ts_policy_recv_ns``, ``ts_infer_start_ns``,
        ``ts_policy_sent_ns`` and ``policy_version``), which are shared: they must be equal
        (as ``==`` on responses compares values) in every agent's response, and the first
        agent's value is kept. Which fields are shared is therefore stated, never guessed from
        the values.

        Examples:
            >>> m = MultiAgentPolicyResponse("e", action={"a": 0, "b": 1}, team="red")
            >>> parts = {agent: m.for_agent(agent) for agent in m.agent_ids}
            >>> MultiAgentPolicyResponse.from_agents("e", parts, shared=["team"]) == m
            True

        Args:
            env_id: Environment identifier for the result.
            responses: ``{agent_id: PolicyResponse}``; each must have an ``action``.
            shared: Names of fields that are the same for every agent (not per-agent); a single
                str is taken as one name.

        Returns:
            A new MultiAgentPolicyResponse.

        Raises:
            TypeError: ``responses`` is not a mapping of single-agent PolicyResponse objects.
            ValueError: ``responses`` is empty; a response's ``env_id`` is neither None nor
                ``env_id`` (rule ``env-id``); no response has an ``action``; a field is present
                for some agents and missing for others; a shared field, stamp or
                ``policy_version`` differs between agents; ``shared`` names ``action`` or a
                field no agent has; or a shared value is a dict keyed by agent ids (all of them:
                it would read back as per-agent; some: the constructor refuses it). Messages
                name the field and the agents.
        """
        if not isinstance(responses, Mapping):
            raise TypeError(
                f"responses must be a mapping {{agent_id: PolicyResponse}}, "
                f"got {type(responses).__name__}"
            )
        if not responses:
            raise ValueError("responses is empty: a multi-agent response needs at least one agent")
        shared_names = {shared} if isinstance(shared, str) else set(shared)
        if "action" in shared_names:
            raise ValueError("shared names 'action', which is always per-agent")
        names: dict[str, None] = {}
        for agent_id, response in responses.items():
            if not isinstance(response, PolicyResponse) or isinstance(
                response, MultiAgentPolicyResponse
            ):
                raise TypeError(
                    f"response for agent {agent_id!r} must be a single-agent PolicyResponse, "
                    f"got {type(response).__name__}"
                )
            check_env_id_matches(response.env_id, env_id, f"response for agent {agent_id!r}")
            names.update(dict.fromkeys(k for k in response.__dict__ if k != "env_id"))
        unknown = sorted(shared_names.difference(names))
        if unknown:
            raise ValueError(f"shared names field(s) {unknown} that no agent's response has")
        agent_ids = list(responses)
        if "action" not in names:
            raise ValueError(f"no response has an action; agents: {agent_ids}")
        names = {"action": None, **names}
        data: dict[str, Any] = {}
        for name in names:
            missing = [a for a, r in responses.items() if name not in r.__dict__]
            if missing:
                raise ValueError(
                    f"field {name!r} is missing for agent(s) {missing} but present for others; "
                    "give every agent the field or none"
                )
            values = [r.__dict__[name] for r in responses.values()]
            if name in shared_names or name in SHARED_FIELDS:
                data[name] = _shared_value(name, agent_ids, values)
            else:
                data[name] = dict(zip(agent_ids, values, strict=True))
        return cls(env_id, **data)

    @staticmethod
    def make_example(  # type: ignore[override]  # the API page gives the multi-agent form this signature
        action_spaces: dict[Any, gym.Space[Any]], env_id: str | None = None, **data: Any
    ) -> MultiAgentPolicyResponse:
        """Create an example MultiAgentPolicyResponse.

        Args:
            action_spaces: Dictionary mapping agent IDs to action spaces.
            env_id: Optional environment identifier.
            **data: Additional response data.

        Returns:
            MultiAgentPolicyResponse with sampled actions for all agents
            (``{agent_id: space.sample()}``).

        Raises:
            TypeError: ``action_spaces`` is not a dict of gymnasium spaces, or ``action`` is
                passed in ``data``.
            ValueError: ``action_spaces`` is empty.
        """
        if not isinstance(action_spaces, Mapping):
            raise TypeError(
                f"action_spaces must be a dict {{agent_id: gymnasium.Space}}, "
                f"got {type(action_spaces).__name__}"
            )
        if not action_spaces:
            raise ValueError("action_spaces is empty: give at least one agent's action space")
        for agent_id, space in action_spaces.items():
            _check_space(space, f"action_spaces[{agent_id!r}]")
        if "action" in data:
            raise TypeError("make_example() samples the actions; do not pass action=")
        actions = {agent_id: space.sample() for agent_id, space in action_spaces.items()}
        return MultiAgentPolicyResponse(env_id, action=actions, **data)


def _shared_value(name: str, agent_ids: list[Any], values: list[Any]) -> Any:
    first = values[0]
    differing = [a for a, v in zip(agent_ids, values, strict=True) if not tree_equal(v, first)]
    if differing:
        if name in STAMP_FIELDS:
            hint = "stamp the combined response instead (e.g. call mark_policy_sent() on it)"
        elif name in SHARED_FIELDS:
            hint = "answers of different policy weights are not one response: ask one policy"
        else:
            hint = "leave it out of shared= to keep it per-agent"
        raise ValueError(
            f"shared field {name!r} differs between agents: agent(s) {differing} differ from "
            f"agent {agent_ids[0]!r}; {hint}"
        )
    if isinstance(first, dict) and first and set(first) <= set(agent_ids):
        exactly = "exactly the agent ids" if len(first) == len(agent_ids) else "agent ids"
        consequence = (
            "it would read back as a per-agent field"
            if len(first) == len(agent_ids)
            else "it would look per-agent with agents missing, which the constructor refuses"
        )
        raise ValueError(
            f"shared field {name!r} is a dict keyed by {exactly}, so {consequence}; make it "
            f"per-agent (leave it out of shared=) or rekey it"
        )
    return first


def _check_agent_actions(action: object) -> None:
    if action is _MISSING:
        raise TypeError(
            "MultiAgentPolicyResponse needs action=, a dict keyed by agent id "
            "(e.g. {'agent_0': 1, 'agent_1': 0})"
        )
    if not issubclass(type(action), dict):  # not isinstance: a Mock(spec=dict) is no dict
        raise TypeError(
            f"MultiAgentPolicyResponse.action must be a dict keyed by agent id, "
            f"got {type(action).__name__} {tree_repr(action)}"
        )
