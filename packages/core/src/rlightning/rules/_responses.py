"""The rules of one response and its fields (private).

``response-type``, ``env-id``, ``has-action``, ``action-in-space`` (its raising form),
``action-mask`` (an action against its mask), ``scalar-field`` and ``buffer-action``. Import
these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from rlightning._space_reasons import _is_tensor
from rlightning.rules._errors import describe, rule_error
from rlightning.rules._mask_actions import mask_violation
from rlightning.rules._masks import MaskLayout
from rlightning.rules._space import space_violation


# ---------------------------------------------------------------------------- response-type
def _is_kind(response: object, multi_agent: bool) -> bool:
    from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

    if multi_agent:
        return isinstance(response, MultiAgentPolicyResponse)
    return isinstance(response, PolicyResponse) and not isinstance(
        response, MultiAgentPolicyResponse
    )


def check_response_type(
    response: object, *, multi_agent: bool, subject: str = "response", fix: str | None = None
) -> None:
    """Check that ``response`` is a response of the kind a caller takes (rule ``response-type``).

    A single-agent caller takes a :class:`~rlightning.PolicyResponse` that is not a
    :class:`~rlightning.MultiAgentPolicyResponse`; a multi-agent one takes a
    :class:`~rlightning.MultiAgentPolicyResponse` (a subclass of either counts as it).

    Args:
        response: What was given; not modified.
        multi_agent: Whether a :class:`~rlightning.MultiAgentPolicyResponse` is needed.
        subject: What the caller calls the argument, for the message.
        fix: How to make the right kind, said in the message (a default hint names the other
            checker of :mod:`rlightning.testing` for a response of the other kind).

    Raises:
        TypeError: ``response`` is not of that kind (rule ``response-type``), the error of
            :func:`response_type_error`.

    Examples:
        >>> from rlightning import PolicyResponse
        >>> check_response_type(PolicyResponse("e", action=1), multi_agent=False)
        >>> check_response_type({}, multi_agent=True)
        Traceback (most recent call last):
        ...
        TypeError: response must be a MultiAgentPolicyResponse, not dict; got {} [rule response-type]
    """  # noqa: E501  (doctest output is one line)
    if not _is_kind(response, multi_agent):
        raise response_type_error(response, multi_agent=multi_agent, subject=subject, fix=fix)


def response_type_error(
    response: object, *, multi_agent: bool, subject: str = "response", fix: str | None = None
) -> TypeError:
    """Build (not raise) rule ``response-type``'s error for a response of the wrong kind.

    For a caller that tests the kind inline on a per-step path and raises this error when it
    is wrong (:func:`check_response_type` raises it too). The caller has found the kind wrong;
    nothing is tested here.

    Args:
        response: What was given instead.
        multi_agent: Whether a :class:`~rlightning.MultiAgentPolicyResponse` was needed.
        subject: What the caller calls the argument.
        fix: How to make the right kind (default: for a response of the other kind, the other
            checker of :mod:`rlightning.testing`).

    Returns:
        The ``TypeError``, for the caller to ``raise``.

    Examples:
        >>> response_type_error(3, multi_agent=False)
        TypeError('response must be a single-agent PolicyResponse, not int; got 3 [rule response-type]')
    """  # noqa: E501  (doctest output is one line)
    if multi_agent:
        wanted = "a MultiAgentPolicyResponse"
        hint = "use check_policy_response for a single-agent PolicyResponse"
    else:
        wanted = "a single-agent PolicyResponse"
        hint = "use check_multi_agent_policy_response for a MultiAgentPolicyResponse"
    if fix is None and _is_kind(response, not multi_agent):
        fix = hint
    return rule_error(
        TypeError,
        "response-type",
        subject,
        f"must be {wanted}, not {type(response).__name__}",
        response,
        fix=fix,
    )


# ---------------------------------------------------------------------------- env-id
def _number_fix(value: object) -> str | None:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"pass str({value!r}) if a number identifies the env"
    return None


def check_env_id(env_id: object, subject: str = "env_id") -> str | None:
    """Check one env id: a str, or None for a response not routed to an env (rule ``env-id``).

    A str is an instance of ``str`` or of a subclass of it (``numpy.str_``, a user's
    ``class EnvName(str)``), judged by ``type()``: an object whose ``__class__`` claims ``str``
    (a ``Mock(spec=str)``) is no str. Nothing is converted: ``3`` is refused, never read as
    ``"3"``.

    Args:
        env_id: The id given; not modified.
        subject: Its name in messages (``"env_id"``, ``"response.env_id"``).

    Returns:
        ``env_id`` itself.

    Raises:
        TypeError: ``env_id`` is neither a str nor None (rule ``env-id``).

    Examples:
        >>> check_env_id("env-0")
        'env-0'
        >>> check_env_id(3)
        Traceback (most recent call last):
        ...
        TypeError: env_id must be a str or None, not int; got 3; fix: pass str(3) if a number identifies the env [rule env-id]
    """  # noqa: E501  (doctest output is one line)
    if env_id is None or issubclass(type(env_id), str):
        return env_id  # type: ignore[return-value]  # a str, checked by type() above
    raise rule_error(
        TypeError,
        "env-id",
        subject,
        f"must be a str or None, not {type(env_id).__name__}",
        env_id,
        fix=_number_fix(env_id),
    )


def check_env_id_matches(env_id: object, expected: str | None, subject: str) -> None:
    """Check that a part's env id is None or the env id of the whole it belongs to (``env-id``).

    A per-agent response inside a multi-agent one, or an answer routed back to an env, carries
    either no env id (None) or the very one of its env.

    Args:
        env_id: The part's env id.
        expected: The env id of the whole.
        subject: The part, named in messages (``"response for agent 'a'"``).

    Raises:
        ValueError: ``env_id`` is neither None nor ``expected`` (rule ``env-id``).

    Examples:
        >>> check_env_id_matches(None, "env-0", "response for agent 'a'")
        >>> check_env_id_matches("env-1", "env-0", "response for agent 'a'")
        Traceback (most recent call last):
        ...
        ValueError: response for agent 'a' has another env_id; got 'env-1'; expected 'env-0' or None [rule env-id]
    """  # noqa: E501  (doctest output is one line)
    if env_id is None or env_id == expected:
        return
    wanted = f"{expected!r} or None" if expected is not None else "None"
    raise rule_error(ValueError, "env-id", subject, "has another env_id", env_id, expected=wanted)


def check_env_ids(
    env_ids: object,
    n: int | None = None,
    *,
    subject: str = "env_ids",
    per: str = "env",
    expected: str | None = None,
    count: str | None = None,
) -> list[str]:
    """Check a list of env ids, one per env or per row of a batch (rule ``env-id``).

    The ids are given as a sequence (a list, a tuple, a 1-D numpy array of str; not a str, not
    bytes), every id a str by :func:`check_env_id`'s test (None is no env id here), ``n`` of
    them when ``n`` is given, all distinct (an env id routes one env's answers and carries its
    state: two envs under one id would get each other's).

    Args:
        env_ids: The ids given; not modified.
        n: How many are needed (the envs, the rows of the batch); None: any number.
        subject: Their name in messages (``"env_ids"``, ``"runner 'r0' env_ids"``).
        per: What each id names, for messages (``"env"``, ``"row"``).
        expected: What kind of argument is taken, said when ``env_ids`` is not a sequence
            (default: ``"a sequence of str (a list, tuple or 1-D array)"``).
        count: The clause saying how many are needed, for messages (default ``"there are
            {n} {per}s"``).

    Returns:
        The ids as a new list.

    Raises:
        TypeError: ``env_ids`` is not a sequence, or an id is not a str (its index named)
            (rule ``env-id``).
        ValueError: there are not ``n`` ids, or an id repeats (rule ``env-id``).

    Examples:
        >>> check_env_ids(("a", "b"), 2)
        ['a', 'b']
        >>> check_env_ids(["a", "a"], 2)
        Traceback (most recent call last):
        ...
        ValueError: env_ids repeats ['a']: each env needs its own id; got ['a', 'a'] [rule env-id]
    """
    if isinstance(env_ids, np.ndarray) and env_ids.ndim == 1:
        env_ids = env_ids.tolist()
    # type(): an object whose __class__ lies is no sequence; a str or bytes is one id, not ids
    if not issubclass(type(env_ids), Sequence) or isinstance(env_ids, (str, bytes, bytearray)):
        raise rule_error(
            TypeError,
            "env-id",
            subject,
            f"must be {expected or 'a sequence of str (a list, tuple or 1-D array)'}, "
            f"not {type(env_ids).__name__}",
            env_ids,
        )
    ids: list[Any] = list(cast("Sequence[Any]", env_ids))
    for index, env_id in enumerate(ids):
        if not issubclass(type(env_id), str):
            raise rule_error(
                TypeError,
                "env-id",
                f"{subject}[{index}]",
                f"must be a str, got {type(env_id).__name__} {describe(env_id)}",
                ids,
                fix=_number_fix(env_id),
            )
    if n is not None and len(ids) != n:
        raise rule_error(
            ValueError,
            "env-id",
            subject,
            f"has {len(ids)} ids but {count or f'there are {n} {per}s'}",
            ids,
            fix=f"pass one env id per {per}",
        )
    if len(set(ids)) != len(ids):
        repeated = [env_id for env_id, seen in Counter(ids).items() if seen > 1]
        raise rule_error(
            ValueError,
            "env-id",
            subject,
            f"repeats {repeated}: each {per} needs its own id",
            ids,
        )
    return ids


# ---------------------------------------------------------------------------- has-action
def check_has_action(fields: Mapping[str, Any], subject: str = "response") -> Any:
    """Return the ``action`` field of a response's field mapping (rule ``has-action``).

    Args:
        fields: The fields (``response.__dict__``, ``response.to_dict()``).
        subject: The response, named in messages.

    Returns:
        ``fields["action"]``.

    Raises:
        ValueError: there is no ``action`` field (rule ``has-action``).

    Examples:
        >>> check_has_action({"value": 0.5})
        Traceback (most recent call last):
        ...
        ValueError: response has no action field among its fields; got ['value'] [rule has-action]
    """
    if "action" in fields:
        return fields["action"]
    raise rule_error(
        ValueError,
        "has-action",
        subject,
        "has no action field among its fields",
        [name for name in fields if name != "env_id"],
    )


# ---------------------------------------------------------------------------- action-in-space
def check_action(space: spaces.Space[Any], action: Any, subject: str = "response.action") -> None:
    """Check that ``action`` is an element of ``space`` (rule ``action-in-space``).

    The verdict is :func:`rlightning.rules.contains` (gymnasium's ``space.contains``), the
    reason :func:`rlightning.rules.space_violation`'s.

    Args:
        space: The action space.
        action: The action; not modified.
        subject: The action, named in messages (``"agent 'a' action"``).

    Raises:
        ValueError: ``action`` is not in ``space`` (rule ``action-in-space``).

    Examples:
        >>> from gymnasium.spaces import Discrete
        >>> check_action(Discrete(2), 2)
        Traceback (most recent call last):
        ...
        ValueError: response.action is not in Discrete(2): 2 is outside [0, 1]; got 2 [rule action-in-space]
    """  # noqa: E501  (doctest output is one line)
    reason = space_violation(space, action)
    if reason is not None:
        raise rule_error(
            ValueError, "action-in-space", subject, f"is not in {space}: {reason}", action
        )


# ---------------------------------------------------------------------------- action-mask
def check_action_allowed(
    space: spaces.Space[Any],
    mask: Any,
    action: Any,
    *,
    layout: MaskLayout | None = None,
    subject: str = "response.action",
    mask_subject: str = "response.action_mask",
) -> None:
    """Check that ``mask`` allows ``action`` (rule ``action-mask``; the mask's own rules first).

    The verdict is :func:`rlightning.rules.mask_violation`'s.

    Args:
        space: Discrete, 1-D MultiDiscrete or 1-D MultiBinary action space.
        mask: The mask; not modified.
        action: The action; not modified.
        layout: ``"gymnasium"`` or ``"flat"``; None: a tuple is read in gymnasium's layout and
            anything else in sb3-contrib's flat one (they differ only for MultiDiscrete).
        subject: The action, named in messages (the reason follows it: ``"agent 'a' action"``
            gives ``"agent 'a' action 1 is masked out by the action mask (legal: [0])"``).
        mask_subject: The mask, named in messages about the mask itself.

    Raises:
        TypeError: as :func:`rlightning.rules.check_action_mask`.
        ValueError: the mask is malformed or allows no action (as ``check_action_mask``), or
            it does not allow ``action`` (rule ``action-mask``).

    Examples:
        >>> from gymnasium.spaces import Discrete
        >>> check_action_allowed(Discrete(3), [1, 0, 1], 1)
        Traceback (most recent call last):
        ...
        ValueError: response.action 1 is masked out by the action mask (legal: [0, 2]); got 1 [rule action-mask]
    """  # noqa: E501  (doctest output is one line)
    if layout is None:
        layout = "gymnasium" if isinstance(mask, tuple) else "flat"
    reason = mask_violation(space, mask, action, layout=layout, subject=mask_subject)
    if reason is not None:
        raise rule_error(ValueError, "action-mask", subject, reason, action)


# ---------------------------------------------------------------------------- scalar-field
#: The fields that hold one real number per env or agent (SB3's per-env value and log_prob).
SCALAR_FIELDS: tuple[str, ...] = ("value", "log_prob")


def _as_real(value: Any) -> float | None:
    """One real number held by ``value``, or None if it holds none or several."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray):
        if value.size == 1 and value.dtype.kind in "iuf":
            return float(value.reshape(-1)[0])
        return None
    if _is_tensor(value):
        dtype = value.dtype
        real = dtype.is_floating_point or not (dtype.is_complex or str(dtype) == "torch.bool")
        if value.numel() == 1 and real:
            return float(value.detach().reshape(-1)[0].item())
    return None


def check_scalar_field(name: str, value: Any, subject: str = "response.") -> float:
    """Check a ``value`` or ``log_prob`` field and return its number (rule ``scalar-field``).

    One real number: a Python or numpy number (not a bool), or an array or tensor of one
    element of an integer or float dtype, as SB3's ``collect_rollouts`` gives one per env;
    ``value`` finite, ``log_prob`` not NaN (``-inf`` is the log-probability of an impossible
    action).

    Args:
        name: The field, one of :data:`SCALAR_FIELDS`.
        value: Its value; not modified (a tensor is read, on its device).
        subject: Prefix naming the owner in messages (``"response."``, ``"agent 'a' "``).

    Returns:
        The number, as a float.

    Raises:
        ValueError: the value holds no number or several, ``value`` is not finite, or
            ``log_prob`` is NaN (rule ``scalar-field``).

    Examples:
        >>> check_scalar_field("value", [1.0, 2.0])
        Traceback (most recent call last):
        ...
        ValueError: response.value must hold one real number (an int or float, or an array/tensor of one element); got [1.0, 2.0] [rule scalar-field]
    """  # noqa: E501  (doctest output is one line)
    number = _as_real(value)
    where = f"{subject}{name}"
    if number is None:
        raise rule_error(
            ValueError,
            "scalar-field",
            where,
            "must hold one real number (an int or float, or an array/tensor of one element)",
            value,
        )
    if name == "value" and not math.isfinite(number):
        raise rule_error(ValueError, "scalar-field", where, "must be finite", value)
    if name == "log_prob" and math.isnan(number):
        raise rule_error(ValueError, "scalar-field", where, "must not be NaN", value)
    return number


# ---------------------------------------------------------------------------- buffer-action
def check_buffer_action(
    space: spaces.Space[Any], buffer_action: Any, subject: str = "response."
) -> None:
    """Check a ``buffer_action`` against a Box action space's shape (rule ``buffer-action``).

    SB3's ``collect_rollouts`` stores the policy's raw action for a Box space, of the space's
    shape; other spaces (Discrete's ``(1,)`` rows) are not checked here.

    Args:
        space: The action space; only a Box is checked.
        buffer_action: The field's value (an array, tensor or nested sequence); not modified.
        subject: Prefix naming the owner in messages.

    Raises:
        ValueError: for a Box space, the shape differs from the space's (rule
            ``buffer-action``).

    Examples:
        >>> import numpy as np
        >>> from gymnasium.spaces import Box
        >>> check_buffer_action(Box(-1, 1, (2,)), np.zeros((1, 2)))
        Traceback (most recent call last):
        ...
        ValueError: response.buffer_action must have the action space's shape (2,), not (1, 2); got array([[0., 0.]], dtype=float64) [rule buffer-action]
    """  # noqa: E501  (doctest output is one line)
    if not isinstance(space, spaces.Box):
        return
    shape = (
        tuple(buffer_action.shape) if hasattr(buffer_action, "shape") else np.shape(buffer_action)
    )
    if shape != space.shape:
        raise rule_error(
            ValueError,
            "buffer-action",
            f"{subject}buffer_action",
            f"must have the action space's shape {space.shape}, not {shape}",
            buffer_action,
        )
