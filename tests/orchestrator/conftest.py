"""Fixtures of the orchestrator's tests."""

import shutil
import tempfile

import pytest

from tests.orchestrator.e2e import kill_leftovers


@pytest.fixture
def ray_temp():
    # Short: Ray's unix sockets live under it and socket paths are limited to ~107 bytes.
    path = tempfile.mkdtemp(prefix="icr-ray-", dir="/tmp")
    yield path
    kill_leftovers(path)
    shutil.rmtree(path, ignore_errors=True)
