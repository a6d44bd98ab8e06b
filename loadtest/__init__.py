"""rigbench stage: loadtest — streaming chat load from 1 to 64 users and beyond.

Caller side (safe to import anywhere; no Locust, no gevent):

- ``loadtest.sweep.run_sweep``      one sweep in a headless Locust subprocess -> run directory
- ``loadtest.streaming.stream_chat`` one measured streaming request (httpx + httpx-sse)
- ``loadtest.schedule``             the sweep schedule as pure functions of elapsed time
- ``loadtest.selftest``             fidelity against ``loadtest.ground_truth``
- ``loadtest.prompts``, ``loadtest.long_context``, ``loadtest.telemetry``

Locust side (imported only inside the Locust process, which gevent patches):
``loadtest/locustfile.py`` with ``users.py`` (the user), ``shapes.py`` (the shape) and
``controller.py`` (step windows, telemetry, error threshold in the master).
"""
