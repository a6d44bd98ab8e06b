"""A rig's phase as a child process: the seconds it took, and how a cancel or a timeout ends it."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from rigbench.cloud.phase_runner import POLL_S, run_phase


@pytest.mark.timing
def test_a_phase_is_timed_to_its_end_not_to_the_next_poll(tmp_path: Path) -> None:
    """The rehearsal's and the loop's records give these seconds: a phase that ends between two polls is not
    counted to the second poll."""
    ended = tmp_path / "ended"
    began = time.time()
    outcome = run_phase([sys.executable, "-c", f"import time; time.sleep({POLL_S * 1.05}); "
                         f"open({str(ended)!r}, 'w').write(repr(time.time()))"], tmp_path / "rig.log", None, 30)
    assert outcome.ok and "import time" in (tmp_path / "rig.log").read_text()
    assert began + outcome.seconds - float(ended.read_text()) < POLL_S / 2, outcome.seconds


def test_a_cancel_and_a_timeout_stop_the_phase_and_say_which(tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    cancelled = run_phase(["sleep", "30"], tmp_path / "rig.log", cancel, 30)
    assert cancelled.cancelled and not cancelled.ok and cancelled.seconds < 10
    timed_out = run_phase(["sleep", "30"], tmp_path / "rig.log", None, 0.3)
    assert timed_out.timed_out and not timed_out.ok and timed_out.seconds < 10
