"""ResponseBatch: a stacked response that splits into per-env responses when first read."""

from __future__ import annotations

import contextlib
import copy
import pickle
import re
import threading
from typing import Any

import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PerEnv, PolicyResponse, ResponseBatch


def _stacked() -> PolicyResponse:
    return PolicyResponse(
        None,
        env_ids=["a", "b", "c"],
        action=np.array([1, 0, 2]),
        obs_row=np.arange(6.0).reshape(3, 2),
        episode_start=PerEnv([True, False, True]),
        policy_name="ppo",
    )


def test_len_and_env_ids_do_not_split():
    stacked = _stacked()
    batch = ResponseBatch(stacked)
    assert len(batch) == 3
    assert batch.env_ids == ["a", "b", "c"]
    assert batch.stacked is stacked


def test_reading_splits_once_as_unbind_does():
    stacked = _stacked()
    expected = stacked.unbind()
    batch = ResponseBatch(stacked)
    first = batch[0]
    assert batch.stacked is None
    assert batch[0] is first
    assert list(batch) == expected
    assert batch == expected
    assert batch[1:] == expected[1:]
    assert [r.env_id for r in reversed(batch)] == ["c", "b", "a"]
    assert batch.index(expected[2]) == 2
    assert expected[1] in batch
    assert batch.env_ids == ["a", "b", "c"]
    assert first.episode_start is True
    assert first.policy_name == "ppo"
    assert np.shares_memory(batch[1].obs_row, stacked.obs_row)  # 2-D rows are views


def test_changes_to_split_responses_are_kept():
    batch = ResponseBatch(_stacked())
    batch[0].action = np.int64(7)
    assert batch[0].action == 7
    assert batch.responses()[0].action == 7
    assert batch.responses() is not batch.responses()  # a new list each call


def test_equality_with_lists_tuples_and_batches():
    a, b = ResponseBatch(_stacked()), ResponseBatch(_stacked())
    assert a == b
    assert a == tuple(_stacked().unbind())
    assert a != _stacked().unbind()[:2]
    assert (a == "abc") is False
    assert a != 3


def test_repr_never_splits_and_is_bounded():
    batch = ResponseBatch(_stacked())
    assert repr(batch).startswith("ResponseBatch(stacked=PolicyResponse(env_id=None, env_ids=")
    assert batch.stacked is not None  # printing did not split it
    batch.responses()
    assert repr(batch).startswith("ResponseBatch([PolicyResponse(env_id='a', action=")
    many = ResponseBatch(PolicyResponse(None, env_ids=[f"e{i}" for i in range(64)], a=np.zeros(64)))
    many.responses()
    text = repr(many)
    assert text.endswith("... (56 more)])")
    assert "env_id='e7'" in text and "env_id='e8'" not in text


def test_concatenation_gives_lists_and_index_says_what_is_missing():
    batch = ResponseBatch(_stacked())
    extra = PolicyResponse("d", action=np.int64(0))
    both = batch + [extra]  # noqa: RUF005 (the operator is what is tested)
    assert type(both) is list and len(both) == 4 and both[3] is extra
    assert ([extra] + batch)[0] is extra  # noqa: RUF005
    assert (batch + ResponseBatch(_stacked()))[3].env_id == "a"
    assert batch.count(batch[0]) == 1
    with pytest.raises(ValueError, match="is not in list"):
        batch.index(extra)
    with pytest.raises(TypeError):
        batch + 3  # type: ignore[operator]


def test_pickle_and_copy_keep_the_state():
    batch = ResponseBatch(_stacked())
    back = pickle.loads(pickle.dumps(batch, protocol=5))
    assert back.stacked is not None
    assert back == batch
    assert back.stacked is None
    assert batch.stacked is None  # compared: split
    again = pickle.loads(pickle.dumps(batch))
    assert again.stacked is None
    assert again == batch
    assert copy.deepcopy(batch) == batch


def test_multi_agent_batches_split_per_agent_dicts():
    stacked = MultiAgentPolicyResponse(
        None, env_ids=["e0", "e1"], action={"p0": np.array([1, 2]), "p1": np.array([3, 4])}
    )
    batch = ResponseBatch(stacked)
    assert type(batch[1]) is MultiAgentPolicyResponse
    assert batch[1].action == {"p0": 2, "p1": 4}


@pytest.mark.torch
def test_tensor_rows_are_views():
    import torch

    values = torch.arange(3.0)
    batch = ResponseBatch(PolicyResponse(None, env_ids=["a", "b", "c"], value=values))
    row = batch[2].value
    assert row.shape == ()
    assert row.data_ptr() == values[2].data_ptr()


def test_bad_input_is_refused_with_the_reason():
    with pytest.raises(TypeError, match="takes a stacked PolicyResponse"):
        ResponseBatch({"env_ids": ["a"]})  # type: ignore[type-var]
    with pytest.raises(ValueError, match=re.escape("got the response of env 'a'")):
        ResponseBatch(PolicyResponse("a", action=1))
    with pytest.raises(ValueError, match="has none"):
        ResponseBatch(PolicyResponse(None, action=np.array([1])))
    with pytest.raises(TypeError, match=re.escape("must be a list of env ids, got tuple")):
        ResponseBatch(PolicyResponse(None, env_ids=("a",), action=np.array([1])))
    with pytest.raises(ValueError, match="is empty"):
        ResponseBatch(PolicyResponse(None, env_ids=[], action=np.array([])))


def test_rows_that_do_not_match_are_found_when_split():
    batch = ResponseBatch(PolicyResponse(None, env_ids=["a", "b"], action=np.array([1, 2, 3])))
    assert len(batch) == 2
    with pytest.raises(ValueError, match=re.escape("field 'action' is an array of shape (3,)")):
        batch[0]


def test_trusted_skips_the_checks_but_behaves_the_same():
    stacked = _stacked()
    batch = ResponseBatch.trusted(stacked)
    assert batch.stacked is stacked
    assert batch == stacked.unbind()


def test_trusted_from_fields_is_trusted_of_the_response_those_fields_make():
    stacked = _stacked()
    fields = dict(vars(stacked))
    batch = ResponseBatch.trusted_from_fields(PolicyResponse, fields)
    assert batch.is_trusted
    assert type(batch.stacked) is PolicyResponse
    assert batch.stacked == stacked
    assert list(vars(batch.stacked)) == list(fields)  # env_id first, the order kept
    assert vars(batch.stacked) is not fields  # copied: the caller's dict is not kept
    assert batch == stacked.unbind()
    nested = ResponseBatch.trusted_from_fields(
        _MyResponse, {"env_id": None, "env_ids": ["a", "b"], "action": PerEnv([0, 1])}
    )
    assert type(nested.stacked) is _MyResponse
    assert nested[1] == _MyResponse("b", action=1)


class _MyResponse(PolicyResponse):
    """A user subclass: the batch's responses keep its class."""


class _MyBatch(ResponseBatch[PolicyResponse]):
    __slots__ = ()


def test_trust_is_given_by_trusted_only_and_lost_in_transport():
    assert ResponseBatch.trusted(_stacked()).is_trusted
    assert not ResponseBatch(_stacked()).is_trusted
    back = pickle.loads(pickle.dumps(ResponseBatch.trusted(_stacked())))
    assert back.stacked is not None
    assert not back.is_trusted


def test_a_subclass_unpickles_as_itself():
    back = pickle.loads(pickle.dumps(_MyBatch(_stacked())))
    assert type(back) is _MyBatch
    assert back == _stacked().unbind()


# ---------------------------------------------------------------- concurrent first reads
class _SlowUnbind(PolicyResponse):
    """A stacked response whose unbind waits (up to 1 s) until a second thread unbinds too.

    Stands in for the microseconds a real unbind of a large batch takes, during which the GIL
    may pass to another thread reading the same batch. A batch that splits once (a lock) makes
    the second reader wait instead, the barrier times out and the test still finishes.
    """

    barrier = threading.Barrier(2, timeout=1.0)

    def unbind(self) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        return super().unbind()


def test_concurrent_first_reads_share_one_split() -> None:
    _SlowUnbind.barrier.reset()
    stacked = _SlowUnbind(None, env_ids=["a", "b"], action=np.zeros((2, 1)))
    batch = ResponseBatch(stacked)
    got: list[Any] = [None, None]

    def read(k: int) -> None:
        got[k] = batch[0]

    threads = [threading.Thread(target=read, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got[0].note = "set by thread 0"
    got[1].note = "set by thread 1"
    assert got[0] is got[1] is batch[0]
    assert batch[0].note == "set by thread 1"
