"""Stop signals raised as ``Stopped`` (a KeyboardInterrupt naming its signal), ignored ones left ignored."""

from __future__ import annotations

import os
import signal
import time

import pytest

from core.signals import STOP_SIGNALS, Stopped, exit_status, signal_name, stop_signals_as_keyboard_interrupt


def send_to_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    for _ in range(20):  # the handler runs between two bytecodes, at the latest here
        time.sleep(0.01)


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda signum: signal.Signals(signum).name)
def test_a_stop_signal_raises_stopped_naming_it(signum: int) -> None:
    before = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt) as stopped, stop_signals_as_keyboard_interrupt():
        send_to_self(signum)
    assert isinstance(stopped.value, Stopped) and stopped.value.signum == signum
    assert exit_status(stopped.value) == 128 + signum
    assert signal_name(stopped.value) == signal.Signals(signum).name
    assert signal.getsignal(signum) == before, "the handler before the block was not put back"


def test_a_signal_the_parent_ignores_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with stop_signals_as_keyboard_interrupt():
            send_to_self(signal.SIGHUP)
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_pythons_own_ctrl_c_is_sigint() -> None:
    assert exit_status(KeyboardInterrupt()) == 130 and signal_name(KeyboardInterrupt()) == "SIGINT"
