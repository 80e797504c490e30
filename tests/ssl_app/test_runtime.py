"""ssl_app.runtime: malloc keeps freed memory, so re-allocated activations cost no page faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Counts the minor page faults of training steps 2-6 of the small CNN at batch 512 (step 1 faults
# in fresh heap pages either way).
_PROBE = """
import json, resource, sys
from ssl_app.runtime import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
if sys.argv[2:] == ["only-applied"]:
    print(json.dumps({"applied": applied}))
    sys.exit()
import torch
from ssl_app.models import build_backbone
torch.manual_seed(0)
net, _ = build_backbone("small_cnn")
images = torch.randn(512, 3, 32, 32)  # activations of 33 MB: above glibc's largest mmap threshold
faults = []
for _ in range(6):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    net(images).square().mean().backward()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": sum(faults[1:])}))
"""


def _probe(mode: str, *args: str, **env: str) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "SSL_APP_MALLOC"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, *args], env={**environment, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_training_steps_no_longer_fault_in_fresh_pages():
    """Catches the setting not taking effect (wrong mallopt codes, or applied too late): every
    step's large activations would come back as fresh pages, the cost in benchmarks/README.md."""
    default, kept = _probe("default"), _probe("keep")
    assert kept["applied"] is True
    assert default["faults"] > 100_000  # the control: glibc's default maps every large block anew
    assert kept["faults"] < default["faults"] / 5  # measured: ~370,000 vs ~30,000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_an_environment_that_tunes_malloc_itself_wins():
    """Catches overriding a user's MALLOC_* settings or the documented opt-out."""
    assert _probe("keep", "only-applied")["applied"] is True
    assert _probe("keep", "only-applied", MALLOC_ARENA_MAX="2")["applied"] is False
    assert _probe("keep", "only-applied", SSL_APP_MALLOC="default")["applied"] is False
