import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_intra_op_thread():
    """Tiny models on 2 cores: torch's intra-op threads cost more than they give, and the DDP
    tests run two processes side by side."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pytest_generate_tests(metafunc):
    """A test that takes ``loss_case``, ``loss_first_case``, ``loss_group`` or ``method_case`` runs for
    every registered loss / method (and its ``examples``), read from the registries now: tests/generic.py."""
    from tests.generic import GENERIC_ARGUMENTS, parametrize

    if set(GENERIC_ARGUMENTS) & set(metafunc.fixturenames):
        parametrize(metafunc)
