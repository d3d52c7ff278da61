"""The core's public surface: __all__ is complete, importable and every public member documented."""

from __future__ import annotations

import inspect

import rlightning
import rlightning.rules
import rlightning.types
import rlightning.wire
from rlightning import MultiAgentPolicyResponse, PolicyResponse

API_PAGE_MEMBERS = {
    "to_dict",
    "cpu",
    "cuda",
    "numpy",
    "mark_policy_sent",
    "compute_sent_latency",
    "make_example",
}


def test_all_is_complete_and_importable():
    for module in (rlightning, rlightning.rules, rlightning.types, rlightning.wire):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
    assert {"PolicyResponse", "MultiAgentPolicyResponse"} <= set(rlightning.types.__all__)


def test_every_api_page_member_exists_with_its_signature():
    for name in API_PAGE_MEMBERS:
        assert callable(getattr(PolicyResponse, name)), name
    assert list(inspect.signature(PolicyResponse.cuda).parameters) == ["self", "device"]
    assert list(inspect.signature(PolicyResponse.compute_sent_latency).parameters) == [
        "self",
        "now_ns",
    ]
    assert isinstance(inspect.getattr_static(PolicyResponse, "make_example"), staticmethod)
    assert isinstance(
        inspect.getattr_static(MultiAgentPolicyResponse, "make_example"), staticmethod
    )
    assert issubclass(MultiAgentPolicyResponse, PolicyResponse)


def test_every_public_member_has_a_google_style_docstring():
    for cls in (
        PolicyResponse,
        MultiAgentPolicyResponse,
        rlightning.PerEnv,
        rlightning.EnvIds,
        rlightning.ResponseBatch,
    ):
        assert len(inspect.getdoc(cls) or "") > 80, cls.__name__
        for name, member in vars(cls).items():
            if name.startswith("_"):
                continue
            func = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if isinstance(func, property):
                func = func.fget
            if not callable(func):
                continue
            doc = inspect.getdoc(func) or ""
            assert doc, f"{cls.__name__}.{name} has no docstring"
            if inspect.signature(func).return_annotation not in ("None", None):
                assert "Returns:" in doc or isinstance(member, property), f"{cls.__name__}.{name}"


def test_response_classes_keep_their_module_path():
    # Pickles and the wire format record the class path. MultiAgentPolicyResponse is defined in
    # a private module but presented as rlightning.types.policy_response's, the functions in its
    # body too (so doctest finds their examples there, as before the move).
    import doctest
    import pickle

    from rlightning.types import policy_response as pr_module

    for cls in (PolicyResponse, MultiAgentPolicyResponse):
        assert cls.__module__ == "rlightning.types.policy_response"
        assert getattr(pr_module, cls.__qualname__) is cls
    assert MultiAgentPolicyResponse.__qualname__ == "MultiAgentPolicyResponse"
    members = vars(MultiAgentPolicyResponse)
    for name in ("__init__", "__setattr__", "is_per_agent", "for_agent"):
        assert members[name].__module__ == "rlightning.types.policy_response", name
    for name in ("from_agents", "make_example"):
        assert members[name].__func__.__module__ == "rlightning.types.policy_response", name
    assert members["agent_ids"].fget.__module__ == "rlightning.types.policy_response"
    payload = pickle.dumps(MultiAgentPolicyResponse("e", action={"a": 1}), protocol=4)
    assert b"rlightning.types.policy_response" in payload
    assert b"_multi_agent" not in payload
    found = {test.name for test in doctest.DocTestFinder().find(pr_module)}
    assert "rlightning.types.policy_response.MultiAgentPolicyResponse.from_agents" in found
