"""PolicyResponse (``rlightning.types.policy_response``) on numpy/Python data (no torch).

Construction, env_id checks, reserved field names, attributes, ``to_dict``, latency stamps and
``make_example``. Equality and repr are in test_tree.py, pickling and copies in test_pickle.py,
MultiAgentPolicyResponse in test_multi_agent.py, conversions of tensors in test_convert.py.
"""

from __future__ import annotations

import pickle
import re
import time
from collections import OrderedDict, defaultdict, namedtuple
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest

import rlightning
import rlightning.rules
import rlightning.types
from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.types import policy_response as pr_module

Hidden = namedtuple("Hidden", ["h", "c"])


# ---------------------------------------------------------------- construction & access
def test_importable_from_three_places():
    assert rlightning.PolicyResponse is rlightning.types.PolicyResponse is pr_module.PolicyResponse
    assert (
        rlightning.MultiAgentPolicyResponse
        is rlightning.types.MultiAgentPolicyResponse
        is pr_module.MultiAgentPolicyResponse
    )
    assert set(rlightning.__all__) >= {"PolicyResponse", "MultiAgentPolicyResponse"}


def test_is_simple_namespace_with_data_as_attributes():
    from types import SimpleNamespace

    r = PolicyResponse("env-0", action=np.array([1]), value=0.5)
    assert isinstance(r, SimpleNamespace)
    assert r.env_id == "env-0"
    assert r.value == 0.5
    np.testing.assert_array_equal(r.action, [1])
    r.log_prob = -1.0
    assert r.log_prob == -1.0


def test_env_id_keyword_and_none():
    assert PolicyResponse(env_id="e", action=1).env_id == "e"
    assert PolicyResponse(None, action=1).env_id is None


@pytest.mark.parametrize("bad", [3, 1.5, b"e", ["e"]])
def test_env_id_must_be_str_or_none(bad):
    with pytest.raises(
        TypeError,
        match=re.escape(f"env_id must be a str or None, not {type(bad).__name__}; got "),
    ):
        PolicyResponse(bad, action=1)
    r = PolicyResponse("e")
    with pytest.raises(TypeError, match="env_id must be a str"):
        r.env_id = bad


def test_env_id_checks() -> None:
    class Name(str):
        pass

    assert PolicyResponse(None, action=1).env_id is None
    assert PolicyResponse(env_id="e", action=1).env_id == "e"
    assert PolicyResponse(Name("e"), action=1).env_id == "e"
    msg = (
        "env_id must be a str or None, not int; got 3; fix: pass str(3) if a number identifies "
        "the env [rule env-id]"
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        PolicyResponse(3, action=1)
    with pytest.raises(TypeError, match=re.escape(msg)):
        MultiAgentPolicyResponse(3, action={"a": 1})


@pytest.mark.parametrize(
    "name",
    [
        "to_dict",
        "cpu",
        "cuda",
        "numpy",
        "to",
        "mark_policy_sent",
        "compute_sent_latency",
        "compute_policy_latency",
        "make_example",
        "__class__",
        "__dict__",
        "__eq__",
    ],
)
def test_reserved_names_refused_at_init_and_setattr(name):
    msg = f"field name(s) {name!r} would shadow PolicyResponse.{name}"
    with pytest.raises(ValueError, match=re.escape(msg)):
        PolicyResponse("e", **{name: 1})
    r = PolicyResponse("e")
    if not name.startswith("__"):
        with pytest.raises(ValueError, match=re.escape(msg)):
            setattr(r, name, 1)


def test_reserved_clash_message_lists_every_clash():
    with pytest.raises(ValueError, match=re.escape("field name(s) 'cpu', 'numpy' would shadow")):
        PolicyResponse("e", numpy=1, cpu=2, action=0)


# ids avoid the bare word "cuda": conftest treats a test whose keywords include it as a GPU test.
@pytest.mark.parametrize(
    "name",
    ["to_dict", "cpu", "numpy", "to", "cuda", "__class__", "__dict__"],
    ids=lambda name: f"name={name}",
)
def test_reserved_names_are_refused_at_construction(name: str) -> None:
    msg = f"field name(s) {name!r} would shadow PolicyResponse.{name}"
    with pytest.raises(ValueError, match=re.escape(msg)):
        PolicyResponse("e", **{name: 1})
    msg = f"field name(s) {name!r} would shadow MultiAgentPolicyResponse.{name}"
    with pytest.raises(ValueError, match=re.escape(msg)):
        MultiAgentPolicyResponse("e", action={"a": 1}, **{name: 1})
    r = PolicyResponse("e", action=1)
    with pytest.raises(ValueError, match=re.escape(f"would shadow PolicyResponse.{name}")):
        setattr(r, name, 1)


@pytest.mark.parametrize("name", ["__deepcopy__", "__array__", "__array_interface__"])
def test_dunder_protocol_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        PolicyResponse("env-0", **{name: 5})


def test_env_id_and_action_cannot_be_deleted() -> None:
    response = PolicyResponse("env-0", action=1)
    with pytest.raises((AttributeError, TypeError, ValueError), match="env_id"):
        del response.env_id
    assert response.env_id == "env-0"
    multi = MultiAgentPolicyResponse("env-0", action={"a": 1})
    with pytest.raises((AttributeError, TypeError, ValueError), match="action"):
        del multi.action
    assert multi.agent_ids == ["a"]


def test_values_are_not_copied():
    a = np.zeros(3)
    r = PolicyResponse("e", action=a)
    assert r.action is a


def test_fields_keep_their_order_and_env_id_comes_first() -> None:
    r = PolicyResponse("e", b=1, a=2, c=3)
    assert list(vars(r)) == ["env_id", "b", "a", "c"]
    assert list(r.to_dict()) == ["b", "a", "c"]


# ---------------------------------------------------------------- to_dict
def test_to_dict_excludes_env_id_and_stamps_and_keeps_order():
    r = PolicyResponse("e", action=1, ts_env_sent_ns=5, value=2.0)
    r.mark_policy_sent()
    r.log_prob = -0.1
    assert r.to_dict() == {"action": 1, "value": 2.0, "log_prob": -0.1}
    assert list(r.to_dict()) == ["action", "value", "log_prob"]
    assert r.ts_env_sent_ns == 5  # still on the response


def test_to_dict_is_a_shallow_copy():
    a = np.zeros(2)
    r = PolicyResponse("e", action=a)
    d = r.to_dict()
    d["new"] = 1
    assert not hasattr(r, "new")
    assert d["action"] is a


def test_to_dict_is_a_new_dict_without_the_envelope() -> None:
    t = np.zeros(1)
    r = PolicyResponse("e", action=t, ts_env_sent_ns=5, value=1.0)
    r.mark_policy_sent()
    d = r.to_dict()
    assert d == {"action": t, "value": 1.0}
    assert d["action"] is t
    d["extra"] = 1
    assert not hasattr(r, "extra")
    assert r.ts_env_sent_ns == 5


# ---------------------------------------------------------------- timing
def test_mark_policy_sent_stamps_ns_and_returns_self():
    r = PolicyResponse("e", action=1)
    before = time.time_ns()
    assert r.mark_policy_sent() is r
    assert isinstance(r.ts_policy_sent_ns, int)
    assert before <= r.ts_policy_sent_ns <= time.time_ns()


def test_compute_sent_latency_seconds():
    r = PolicyResponse("e", ts_env_sent_ns=1_000_000_000)
    assert r.compute_sent_latency(now_ns=3_500_000_000) == pytest.approx(2.5)
    r.ts_env_sent_ns = np.int64(1_000_000_000)
    assert r.compute_sent_latency(now_ns=2_000_000_000) == pytest.approx(1.0)


def test_compute_sent_latency_uses_clock_when_now_is_none():
    r = PolicyResponse("e", ts_env_sent_ns=time.time_ns() - 50_000_000)
    latency = r.compute_sent_latency()
    assert 0.05 <= latency < 5.0


@pytest.mark.parametrize("stamp", ["123", 1.5, True, [1]])
def test_compute_sent_latency_zero_for_bad_stamp(stamp):
    r = PolicyResponse("e", ts_env_sent_ns=stamp)
    with pytest.warns(rlightning.StampWarning, match="ts_env_sent_ns must be an int"):
        assert r.compute_sent_latency(now_ns=10**18) == 0.0


def test_latency_zero_when_stamp_missing(recwarn: pytest.WarningsRecorder) -> None:
    r = PolicyResponse("e")
    assert r.compute_sent_latency() == 0.0
    assert r.compute_policy_latency() == 0.0
    r.ts_env_sent_ns = None  # "not stamped"
    assert r.compute_sent_latency() == 0.0
    assert not [w for w in recwarn if issubclass(w.category, rlightning.StampWarning)]


def test_latency_never_negative_under_clock_skew(recwarn: pytest.WarningsRecorder) -> None:
    r = PolicyResponse("e", ts_env_sent_ns=time.time_ns() + 10**10)  # 10 s ahead: clock skew
    assert r.compute_sent_latency() == 0.0
    assert not [w for w in recwarn if issubclass(w.category, rlightning.StampWarning)]
    r = PolicyResponse("e", ts_policy_sent_ns=10**19)
    with pytest.warns(rlightning.StampWarning, match="ts_policy_sent_ns is 1e\\+10 s ahead"):
        assert r.compute_policy_latency(now_ns=1) == 0.0


# ---------------------------------------------------------------- stamps the latency reads as 0.0
_NOW = 1_800_000_000 * 10**9  # a now_ns in 2027


@pytest.mark.parametrize(
    ("stamp", "problem", "expected_fix"),
    [
        (
            1_800_000_000.25,
            "ts_env_sent_ns must be an int of nanoseconds since the epoch (time.time_ns()); "
            "got 1800000000.25",
            "fix: time.time() gives float seconds; stamp with time.time_ns() (int nanoseconds)",
        ),
        (
            np.float64(1.5),
            # numpy 1.x and 2.x repr a numpy float differently: the value is checked as "1.5"
            "ts_env_sent_ns must be an int of nanoseconds since the epoch (time.time_ns()); got ",
            "fix: time.time() gives float seconds",
        ),
        (
            -5,
            "ts_env_sent_ns must not be negative; got -5",
            "fix: stamp with time.time_ns() (int nanoseconds since the epoch)",
        ),
        (
            2**64,
            "ts_env_sent_ns must fit in 64 bits (at most 2**64 - 1 nanoseconds); "
            "got 18446744073709551616",
            "fix: stamp with time.time_ns()",
        ),
        (
            _NOW + 3600 * 10**9,
            f"ts_env_sent_ns is 3600 s ahead of now_ns={_NOW} (more than the 60 s of clock skew "
            f"tolerated); got {_NOW + 3600 * 10**9}",
            "fix: stamp with time.time_ns() when the message is sent",
        ),
    ],
    ids=["float-seconds", "numpy-float", "negative", "beyond-64-bits", "an-hour-ahead"],
)
def test_unusable_stamp_warns_naming_field_value_and_expectation(
    stamp: object, problem: str, expected_fix: str
) -> None:
    response = PolicyResponse("env-0", ts_env_sent_ns=stamp)
    with pytest.warns(rlightning.StampWarning) as caught:
        assert response.compute_sent_latency(now_ns=_NOW) == 0.0
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("compute_sent_latency() returned 0.0: ")
    assert "1.5" in message or not isinstance(stamp, np.floating)
    for part in (
        problem,
        "expected an int of nanoseconds since the epoch from time.time_ns(), at most 60 s ahead",
        expected_fix,
        "[rule timestamp]",
    ):
        assert part in message, (part, message)
    assert caught[0].filename == __file__  # points at the caller of compute_sent_latency


def test_stamp_warning_is_a_public_runtime_warning() -> None:
    assert issubclass(rlightning.StampWarning, RuntimeWarning)
    assert rlightning.StampWarning is rlightning.rules.StampWarning
    assert "StampWarning" in rlightning.__all__ and "StampWarning" in rlightning.rules.__all__
    assert rlightning.rules.STAMP_FUTURE_TOLERANCE_NS == 60 * 10**9


def test_stamp_warning_once_per_field_and_reason(recwarn: pytest.WarningsRecorder) -> None:
    import warnings

    warnings.simplefilter("always")  # only rlightning's own once-registry may hold it back

    def stamp_warnings() -> list[str]:
        found = [str(w.message) for w in recwarn if issubclass(w.category, rlightning.StampWarning)]
        recwarn.clear()
        return found

    assert PolicyResponse("e", ts_env_sent_ns=1.5).compute_sent_latency(_NOW) == 0.0
    assert len(stamp_warnings()) == 1
    # The same field and reason, another value and another response: no second warning.
    assert PolicyResponse("e", ts_env_sent_ns=2.5).compute_sent_latency(_NOW) == 0.0
    assert stamp_warnings() == []
    # Another reason for the same field, and the same reason for the other field: warned once each.
    assert PolicyResponse("e", ts_env_sent_ns=-1).compute_sent_latency(_NOW) == 0.0
    assert PolicyResponse("e", ts_policy_sent_ns=1.5).compute_policy_latency(_NOW) == 0.0
    found = stamp_warnings()
    assert len(found) == 2
    assert "ts_env_sent_ns must not be negative" in found[0]
    assert found[1].startswith("compute_policy_latency() returned 0.0: ts_policy_sent_ns must be")
    assert PolicyResponse("e", ts_env_sent_ns=-2).compute_sent_latency(_NOW) == 0.0
    assert stamp_warnings() == []


def test_valid_stamps_do_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    for stamp in (_NOW - 1, np.int64(_NOW - 10**9), np.uint64(_NOW - 5), _NOW + 59 * 10**9, _NOW):
        response = PolicyResponse("e", ts_env_sent_ns=stamp)
        assert response.compute_sent_latency(now_ns=_NOW) >= 0.0
    assert not [w for w in recwarn if issubclass(w.category, rlightning.StampWarning)]


def test_stamp_warning_can_be_made_an_error() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=rlightning.StampWarning)
        with pytest.raises(rlightning.StampWarning, match="ts_env_sent_ns must not be negative"):
            PolicyResponse("e", ts_env_sent_ns=-1).compute_sent_latency(_NOW)


def test_compute_policy_latency():
    r = PolicyResponse("e").mark_policy_sent()
    assert r.compute_policy_latency(now_ns=r.ts_policy_sent_ns + 2_000_000) == pytest.approx(0.002)


@pytest.mark.parametrize("now", [1.5, "1", True])
def test_latency_now_ns_must_be_int(now):
    r = PolicyResponse("e", ts_env_sent_ns=1)
    with pytest.raises(TypeError, match=re.escape("now_ns must be an int of nanoseconds")):
        r.compute_sent_latency(now_ns=now)
    with pytest.raises(TypeError, match="now_ns must be an int"):
        r.compute_policy_latency(now_ns=now)


@pytest.mark.parametrize(
    ("stamp", "now"), [(0, 10**400), (-(10**400), 5)], ids=["huge-now", "huge-negative-stamp"]
)
@pytest.mark.filterwarnings("ignore::rlightning.StampWarning")  # the negative stamp's 0.0
def test_latency_with_huge_ints(stamp: int, now: int) -> None:
    response = PolicyResponse("env-0", ts_env_sent_ns=stamp)
    try:
        latency = response.compute_sent_latency(now)
    except ValueError as exc:  # a clear ValueError naming the stamp or now_ns is fine too
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        assert "ts_env_sent_ns" in refusal or "now_ns" in refusal
        return
    assert isinstance(latency, float) and latency >= 0.0


def test_latency_accepts_numpy_ints_and_refuses_bools() -> None:
    response = PolicyResponse("env-0", ts_env_sent_ns=np.uint64(2**63))
    # numpy ints work at runtime though the annotation says int | None.
    now = np.uint64(2**63 + 10**9)
    assert response.compute_sent_latency(now) == pytest.approx(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="now_ns"):
        response.compute_sent_latency(np.bool_(True))  # type: ignore[arg-type]
    with pytest.warns(rlightning.StampWarning, match="got True"):
        assert PolicyResponse("env-0", ts_env_sent_ns=True).compute_sent_latency(10) == 0.0


# ---------------------------------------------------------------- conversions without torch data
def test_conversions_return_self_and_leave_numpy_alone():
    a = np.arange(3)
    nested = {"x": [a, (a,)], "s": "text"}
    r = PolicyResponse("e", action=a, nested=nested, n=3)
    assert r.numpy() is r
    assert r.cpu() is r
    assert r.to("cpu") is r
    assert r.action is a
    assert r.nested is nested


# ---------------------------------------------------------------- hashing
def test_responses_are_unhashable():
    with pytest.raises(TypeError):
        hash(PolicyResponse("e"))


# ---------------------------------------------------------------- make_example
SPACES = {
    "box": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "discrete": gym.spaces.Discrete(4, start=1),
    "multidiscrete": gym.spaces.MultiDiscrete([2, 3]),
    "multibinary": gym.spaces.MultiBinary(5),
    "text": gym.spaces.Text(8),
    "dict": gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Box(0, 1, (2,))}),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiBinary(2))),
    "nested": gym.spaces.Dict(
        {
            "t": gym.spaces.Tuple(
                (gym.spaces.Dict({"x": gym.spaces.Discrete(3)}), gym.spaces.Text(3))
            )
        }
    ),
}


@pytest.mark.parametrize("name", sorted(SPACES))
def test_make_example_samples_from_space(name):
    space = SPACES[name]
    space.seed(0)
    r = PolicyResponse.make_example(space)
    assert type(r) is PolicyResponse
    assert r.env_id is None
    assert space.contains(r.action)
    r2 = PolicyResponse.make_example(space, "env-1", value=1.0)
    assert r2.env_id == "env-1"
    assert r2.value == 1.0


def test_make_example_errors():
    with pytest.raises(
        TypeError, match=re.escape("action_space must be a gymnasium.Space, got int 3")
    ):
        PolicyResponse.make_example(3)
    with pytest.raises(TypeError, match=re.escape("do not pass action=")):
        PolicyResponse.make_example(SPACES["box"], action=1)


def test_make_example_on_unusual_spaces_round_trips() -> None:
    gym = pytest.importorskip("gymnasium")
    spaces = [
        gym.spaces.Graph(node_space=gym.spaces.Box(0, 1, (2,)), edge_space=gym.spaces.Discrete(3)),
        gym.spaces.Sequence(gym.spaces.Discrete(2)),
        gym.spaces.OneOf([gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,))]),
        gym.spaces.MultiDiscrete([]),
        gym.spaces.Tuple(()),
    ]
    for space in spaces:
        space.seed(0)
        response = PolicyResponse.make_example(space, "env-0")
        assert pickle.loads(pickle.dumps(response)) == response
    with pytest.raises(TypeError, match=re.escape("gymnasium.Space")):
        PolicyResponse.make_example({"a": gym.spaces.Discrete(2)})  # type: ignore[arg-type]


# ---------------------------------------------------------------- container types kept
def test_container_types_untouched_without_tensors():
    dd = defaultdict(list, {"a": [np.zeros(1)]})
    r = PolicyResponse("e", dd=dd, od=OrderedDict(x=1), nt=Hidden(1, 2))
    r.numpy().cpu()
    assert r.dd is dd
    assert type(r.od) is OrderedDict and type(r.nt) is Hidden


@pytest.mark.parametrize(
    "clock",
    [time.monotonic_ns, time.perf_counter_ns, lambda: time.time_ns() // 1000],
    ids=["monotonic_ns", "perf_counter_ns", "epoch-microseconds"],
)
def test_stamp_from_another_clock_read_against_time_ns_warns(clock: Callable[[], int]) -> None:
    # Read against time.time_ns(), these would give a latency of decades; 0.0 and a warning.
    response = PolicyResponse("env-0", ts_env_sent_ns=clock())
    with pytest.warns(rlightning.StampWarning) as caught:
        assert response.compute_sent_latency() == 0.0
    message = str(caught[0].message)
    for part in (
        "ts_env_sent_ns is ",
        "before 2001 read against time.time_ns()=",
        "from another clock (time.monotonic_ns(), perf_counter_ns()) or unit",
        "fix: stamp with time.time_ns() (int nanoseconds since the epoch), or pass now_ns from "
        "the same clock the stamp came from",
        "[rule timestamp]",
    ):
        assert part in message, (part, message)


def test_any_clock_may_be_used_with_an_explicit_now(recwarn: pytest.WarningsRecorder) -> None:
    sent = time.monotonic_ns()
    response = PolicyResponse("env-0", ts_env_sent_ns=sent)
    assert response.compute_sent_latency(now_ns=sent + 2_000_000) == pytest.approx(0.002)
    assert rlightning.rules.STAMP_EPOCH_FLOOR_NS == 978_307_200 * 10**9  # 2001-01-01T00:00Z
    assert not [w for w in recwarn if issubclass(w.category, rlightning.StampWarning)]


def test_a_user_subclass_reserves_its_own_members() -> None:
    class Tagged(PolicyResponse):
        def tag(self) -> str:
            return "t"

    class TaggedInit(Tagged):
        def __init__(self, env_id: str | None, **data: object) -> None:
            super().__init__(env_id, **data)

    for cls in (Tagged, TaggedInit):
        with pytest.raises(ValueError, match=re.escape(f"'tag' would shadow {cls.__name__}.tag")):
            cls("e", action=1, tag=2)
        assert cls("e", action=1).tag() == "t"
    # the base class does not reserve a subclass's members
    assert PolicyResponse("e", tag=2).tag == 2


def test_self_is_an_ordinary_field_name() -> None:
    # __init__ takes self positionally only, so ``self`` is a field like any other.
    r = PolicyResponse("e", self=1, action=0)
    assert r.self == 1
    assert r.to_dict() == {"self": 1, "action": 0}
    assert PolicyResponse(env_id="e", action=0).env_id == "e"
    m = MultiAgentPolicyResponse(env_id="e", action={"a": 0}, self=2)
    assert m.self == 2


class _PosesAs:
    """An object whose ``__class__`` lies, so ``isinstance`` takes it for ``cls``."""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return self._cls


def test_an_object_posing_as_str_or_dict_is_refused() -> None:
    assert isinstance(_PosesAs(str), str) and isinstance(_PosesAs(dict), dict)
    with pytest.raises(TypeError, match="env_id must be a str"):
        PolicyResponse(_PosesAs(str), action=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="env_id must be a str"):
        MultiAgentPolicyResponse(_PosesAs(str), action={"a": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a dict keyed by agent id"):
        MultiAgentPolicyResponse("e", action=_PosesAs(dict))


def test_a_subclass_may_not_define_env_id() -> None:
    with pytest.raises(TypeError, match="defines a member named 'env_id'"):

        class Shadowing(PolicyResponse):
            @property
            def env_id(self) -> str:  # type: ignore[override]
                return "shadow"

    class Mixin:
        env_id = "fixed"

    with pytest.raises(TypeError, match="Mixin defines a member named 'env_id'"):

        class Mixed(Mixin, MultiAgentPolicyResponse):  # type: ignore[misc]
            pass

    class Annotated(PolicyResponse):  # an annotation alone is no member
        env_id: str | None

    assert Annotated("e", action=1).env_id == "e"
