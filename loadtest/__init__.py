"""Stage: loadtest — streaming chat load from 1 to 64 users and beyond, every request recorded.

Caller side (safe to import anywhere; no Locust, no gevent):

- ``loadtest.sweep.run_sweep``       one sweep in a headless Locust subprocess -> run directory
- ``loadtest.streaming.stream_chat`` one measured streaming request (the lean ``sse_client``)
- ``loadtest.schedule``              the sweep schedule as pure functions of elapsed time
- ``loadtest.ground_truth``          a server with exactly known timing that logs what it sent
- ``loadtest.process_capacity``      the tok/s one load process follows here (selftest), for warnings
- ``loadtest.selftest``              a sweep of the ground-truth server, with its send log
- ``loadtest.token_counts``          cut requests counted by the server's /tokenize after the run
- ``loadtest.resume``                an interrupted sweep's remaining steps in a linked run
- ``loadtest.prompts``, ``loadtest.long_context``, ``loadtest.telemetry``

Locust side (imported only inside the Locust process, which gevent patches):
``loadtest/locustfile.py`` with ``users.py`` and ``open_loop.py`` (the users), ``chat_session.py``
(what both send through: connections, records, tallies, Locust's events), ``load_process.py``
(each process's state, on its Locust environment), ``shapes.py`` (the shape) and
``controller.py`` (step windows, telemetry, error threshold in the master).

Imports only the base (``core``).
"""

from pathlib import Path

# Locust runs its locustfile by path: this one, wherever rigbench is installed (`rigbench locustfile` prints it)
LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
