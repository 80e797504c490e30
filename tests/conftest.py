import os
import tempfile

import pytest
import torch

# ``list`` keeps its lines in the user's cache (ssl_app.cli.listing_cache): the suite and the processes it starts
# keep theirs in a folder of their own, not in ~/.cache.
os.environ.setdefault("SSL_APP_CACHE", tempfile.mkdtemp(prefix="ssl_app_cache_"))


@pytest.fixture(autouse=True, scope="session")
def one_intra_op_thread():
    """Tiny models on 2 cores: torch's intra-op threads cost more than they give, and the DDP
    tests run two processes side by side."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pytest_collection_modifyitems(config, items):
    """The test modules with slow tests first, in their collected order, then the rest: pytest-xdist
    hands whole modules to its processes in this order (``--dist loadscope``), so the long ones start
    early and the short ones fill the gaps, instead of one process finishing a long module alone."""

    def module(item) -> str:
        return getattr(getattr(item, "module", None), "__name__", "")

    slow_modules = {module(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: module(item) not in slow_modules)


def pytest_generate_tests(metafunc):
    """A test that takes one of ``GENERIC_ARGUMENTS`` (``loss_case``, ``method_case``, ``metric_case``, ...)
    runs for every registered loss / method (and its ``examples``) / datamodule / embedding metric, read
    from the registries now: tests/generic.py."""
    from tests.generic import GENERIC_ARGUMENTS, parametrize

    if set(GENERIC_ARGUMENTS) & set(metafunc.fixturenames):
        parametrize(metafunc)


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The device of the tests that take one: ``SSL_APP_TEST_DEVICE`` (``cpu`` unless set; ``cuda`` on
    a GPU machine, as ``benchmarks/gpu_check.py`` runs them). Asking for CUDA where there is none fails."""
    name = os.environ.get("SSL_APP_TEST_DEVICE", "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        pytest.fail(f"SSL_APP_TEST_DEVICE={name}, but torch sees no CUDA device")
    return torch.device(name)
