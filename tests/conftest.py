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
