"""Side-by-side benchmarks of rlightning against raw torch, TensorDict and Tianshou's Batch.

Run ``python -m benchmarks.run`` from the repository root (``tox -e bench``); see
``docs/performance.md`` for what is measured and the latest figures.
"""
