"""Several llama-server replicas on one machine, started, watched and stopped as one server.

Each replica is a :class:`LocalServer` started from its plan (``core.replicas``): its own port, log,
GPU and CPUs. They are all launched, then each one's health check is awaited, so they load side by side and a
replica that never becomes healthy stops the start with its own log's tail and the others are stopped;
stopping stops all and waits for each. ``dead()`` names any that ended on its own, which fails a
run the way a single server that died does.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import LlamaCppError
from core.replicas import ReplicaPlan
from llamacpp.server import LOOPBACK, LocalServer


class ReplicaSet:
    def __init__(self, binary: Path | str, plans: list[ReplicaPlan], log_folder: Path | None = None,
                 host: str = LOOPBACK, startup_timeout: float = 120.0, port_source: str | None = None) -> None:
        self.plans = plans
        self.servers = [
            LocalServer(binary, plan.args, host=host, port=plan.port,
                        log_path=(log_folder / f"llama-server-{plan.index}.log") if log_folder else None,
                        startup_timeout=startup_timeout, port_source=port_source, environment=plan.environment,
                        cpus=plan.cpus)
            for plan in plans
        ]

    @property
    def urls(self) -> list[str]:
        return [server.base_url for server in self.servers]

    def start(self) -> ReplicaSet:
        for server in self.servers:  # every port first: a busy one starts nothing
            server.check_port()
        launched: list[LocalServer] = []
        try:
            for plan, server in zip(self.plans, self.servers, strict=True):
                try:
                    launched.append(server.launch())  # all load side by side: 16 replicas start in one's time
                except LlamaCppError as error:
                    raise LlamaCppError(f"replica {plan.index} of {len(self.plans)}: {error}") from None
            for plan, server in zip(self.plans, self.servers, strict=True):
                try:
                    server.wait_started()
                except LlamaCppError as error:
                    raise LlamaCppError(f"replica {plan.index} of {len(self.plans)}: {error}") from None
        except BaseException:
            for server in reversed(launched):
                server.stop()
            raise
        return self

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()

    def dead(self) -> list[str]:
        """One line per replica whose process has ended on its own."""
        pairs = zip(self.plans, self.servers, strict=True)
        said = (server.exit_said(f"replica {plan.index}") for plan, server in pairs)
        return [line for line in said if line is not None]

    def __enter__(self) -> ReplicaSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
