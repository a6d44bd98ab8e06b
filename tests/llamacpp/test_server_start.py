"""A server stopped while it starts: the child never outlives the parent that was told to stop."""

from __future__ import annotations

import pytest

from llamacpp.server import LocalServer


def test_ctrl_c_while_the_server_loads_stops_the_child(tmp_path, monkeypatch) -> None:
    loading = tmp_path / "llama-server"  # a server that never reports healthy: it only sleeps
    loading.write_text("#!/bin/sh\nexec sleep 60\n")
    loading.chmod(0o755)
    server = LocalServer(loading, [], log_path=tmp_path / "server.log")

    def interrupted(self: LocalServer) -> None:
        raise KeyboardInterrupt  # as SIGTERM arrives (sigterm_as_keyboard_interrupt) during the health wait

    monkeypatch.setattr(LocalServer, "wait_healthy", interrupted)
    with pytest.raises(KeyboardInterrupt), server:
        pass
    assert server.process is not None
    assert server.process.poll() is not None, "the loading llama-server was left running"
