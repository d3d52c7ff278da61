"""PolicyResponse with real torch tensors: conversions, devices, dtypes, pickling."""

from __future__ import annotations

import copy
import pickle
import re
from collections import OrderedDict, defaultdict, namedtuple

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (core-notorch env)")

from rlightning import MultiAgentPolicyResponse, PolicyResponse  # noqa: E402

pytestmark = pytest.mark.torch

Hidden = namedtuple("Hidden", ["h", "c"])


def make_response(device: str = "cpu") -> PolicyResponse:
    return PolicyResponse(
        "env-0",
        action=torch.tensor([1], device=device),
        log_prob=torch.tensor([-0.5], device=device, requires_grad=True),
        value=torch.tensor([0.25], dtype=torch.bfloat16, device=device),
        state=Hidden(torch.zeros(2, device=device), [torch.ones(3, device=device), 7]),
        per_agent=OrderedDict(a=torch.zeros(1, device=device), b=np.ones(2)),
        obs=np.zeros(3, dtype=np.float32),
        note="hello",
    )


def test_numpy_converts_nested_tensors_in_place(device):
    r = make_response(device)
    obs = r.obs
    assert r.numpy() is r
    assert isinstance(r.action, np.ndarray) and r.action.dtype == np.int64
    np.testing.assert_array_equal(r.action, [1])
    assert isinstance(r.log_prob, np.ndarray) and r.log_prob.dtype == np.float32  # detached
    assert r.value.dtype == np.float32  # bfloat16 widened
    assert r.value[0] == 0.25
    assert type(r.state) is Hidden
    assert isinstance(r.state.h, np.ndarray)
    assert (
        isinstance(r.state.c, list) and isinstance(r.state.c[0], np.ndarray) and r.state.c[1] == 7
    )
    assert type(r.per_agent) is OrderedDict and isinstance(r.per_agent["a"], np.ndarray)
    assert r.obs is obs
    assert r.note == "hello"


def test_numpy_detaches_tensors_that_need_grad():
    t = torch.tensor([2.0], requires_grad=True) * 3.0
    r = PolicyResponse("e", log_prob=t).numpy()
    assert isinstance(r.log_prob, np.ndarray) and r.log_prob[0] == 6.0


def test_numpy_shares_memory_with_cpu_tensor():
    t = torch.arange(4)
    r = PolicyResponse("e", action=t).numpy()
    t[0] = 42
    assert r.action[0] == 42


@pytest.mark.parametrize(
    "dtype", [d for d in ("float8_e4m3fn", "float8_e5m2", "bfloat16") if hasattr(torch, d)]
)
def test_numpy_widens_dtypes_numpy_lacks(dtype):
    t = torch.tensor([0.5, -1.0]).to(getattr(torch, dtype))
    r = PolicyResponse("e", x=t).numpy()
    assert r.x.dtype == np.float32
    np.testing.assert_array_equal(r.x, [0.5, -1.0])


def test_numpy_complex32_becomes_complex64():
    t = torch.tensor([1 + 2j], dtype=torch.complex64).to(torch.complex32)
    assert PolicyResponse("e", x=t).numpy().x.dtype == np.complex64


def test_numpy_error_names_the_field():
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(TypeError, match=re.escape("numpy() failed for field 'weights'")):
        PolicyResponse("e", weights=sparse).numpy()


def test_cpu_keeps_cpu_tensors_as_same_objects():
    t = torch.zeros(2)
    nested = {"h": [t]}
    r = PolicyResponse("e", action=t, nested=nested)
    assert r.cpu() is r
    assert r.action is t
    assert r.nested is nested  # no rebuild when nothing moved


def test_to_cpu_variants_and_dtype_kept(device):
    r = make_response(device)
    for target in ("cpu", torch.device("cpu")):
        r.to(target)
        assert r.action.device.type == "cpu"
        assert r.value.dtype == torch.bfloat16
        assert r.state.c[0].device.type == "cpu"


def test_to_and_cpu_never_mutate_given_containers(device):
    inner = [torch.ones(1, device=device)]
    d = defaultdict(list, {"x": inner})
    r = PolicyResponse("e", d=d)
    r.to("cpu")
    assert inner[0].device.type == device
    if device != "cpu":
        assert r.d is not d
    assert type(r.d) is defaultdict and r.d.default_factory is list


def test_to_rejects_bad_device_string():
    with pytest.raises(RuntimeError):
        PolicyResponse("e", x=torch.zeros(1)).to("not-a-device")


def test_cuda_without_gpu_says_so():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the no-GPU error cannot be observed")
    with pytest.raises(
        RuntimeError, match=re.escape("cuda() needs torch with CUDA and a visible GPU")
    ):
        PolicyResponse("e", x=torch.zeros(1)).cuda()


@pytest.mark.cuda
def test_cuda_moves_nested_tensors_and_back():
    r = make_response("cpu")
    assert r.cuda() is r
    assert r.action.is_cuda and r.state.h.is_cuda and r.per_agent["a"].is_cuda
    assert r.value.dtype == torch.bfloat16
    r.cuda(0)
    r.cuda("cuda:0")
    with pytest.raises(ValueError, match="cuda\\(\\) takes a CUDA device"):
        r.cuda("cpu")
    r.cpu()
    assert r.action.device.type == "cpu"


@pytest.mark.cuda
def test_non_blocking_copy_from_pinned_memory():
    r = PolicyResponse("e", x=torch.arange(1000, dtype=torch.float32).pin_memory())
    r.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert r.x.is_cuda and float(r.x.sum()) == float(sum(range(1000)))


def test_equality_with_tensors(device):
    a = make_response(device)
    b = make_response(device)
    assert a == b
    b.action = torch.tensor([2], device=device)
    assert a != b
    c = make_response(device)
    c.action = c.action.to(torch.int32)
    assert a != c
    assert PolicyResponse("e", x=torch.tensor([float("nan")])) == PolicyResponse(
        "e", x=torch.tensor([float("nan")])
    )
    assert PolicyResponse("e", x=torch.zeros(1)) != PolicyResponse("e", x=np.zeros(1, np.float32))


def test_repr_shows_device_and_dtype():
    r = PolicyResponse("e", small=torch.tensor([1.0]), big=torch.zeros(100, 100))
    assert repr(r) == (
        "PolicyResponse(env_id='e', small=tensor([1.0], dtype=torch.float32, device=cpu), "
        "big=tensor(shape=(100, 100), dtype=torch.float32, device=cpu))"
    )


@pytest.mark.parametrize("protocol", [pickle.DEFAULT_PROTOCOL, 5])
def test_pickle_keeps_dtype_and_device(device, protocol):
    r = make_response(device)
    back = pickle.loads(pickle.dumps(r, protocol=protocol))
    assert back == r
    assert back.value.dtype == torch.bfloat16
    assert back.action.device == r.action.device


def test_copy_and_deepcopy_keep_tensors(device):
    r = make_response(device)
    shallow, deep = copy.copy(r), copy.deepcopy(r)
    assert shallow == r == deep
    assert shallow.action is r.action
    assert deep.action is not r.action
    assert deep.value.dtype == torch.bfloat16 and deep.action.device == r.action.device


def test_multi_agent_conversions_and_split(device):
    r = MultiAgentPolicyResponse(
        "e",
        action={"a": torch.tensor(1, device=device), "b": torch.tensor(0, device=device)},
        log_prob={"a": torch.tensor(-0.1, device=device), "b": torch.tensor(-0.2, device=device)},
    )
    r.numpy()
    assert isinstance(r.action["a"], np.ndarray)
    part = r.for_agent("b")
    assert part.action == 0
    assert np.isclose(part.log_prob, -0.2)
