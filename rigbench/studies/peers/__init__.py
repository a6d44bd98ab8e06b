"""The peers study: rigbench beside two other load generators, each judged against the ground-truth server.

Why: the self-test says how exact rigbench is; it does not say whether another tool would do
better or worse on the same machine. This benchmark drives rigbench, servebench and guidellm
with the same closed-loop streaming loads (N users, fixed 128-token replies, a fixed duration)
against ``loadtest.ground_truth``, one tool at a time and a fresh truth server for each run, and
compares what each tool reports with what the truth server logged that it sent:

- TTFT p50 error: the tool's p50 TTFT minus the truth log's p50 of (first send - received),
  over the requests the truth server received inside the tool's measured window;
- aggregate tok/s error: the tool's reported output tok/s against the tokens the truth server
  sent over the same span (the tool's measured window when it says which one, else the span
  the truth server was busy: first request received to last chunk sent);
- ITL p50 and TPOT p50 as each tool reports them (a tool's ITL is per chunk or per token as
  that tool means it; the truth is the configured per-token interval, times tokens per chunk
  for a per-chunk figure);
- the load tool's CPU (psutil over its process tree) over the span the truth server was busy,
  as % of one core and as CPU milliseconds per 1,000 streamed chunks (chunks from the truth log).

Each peer is installed once in its own virtualenv under the rigbench cache
(``<cache>/peers/<name>-<version>``), so its dependencies never meet rigbench's. A tool that
cannot be installed or fails a run leaves its error in its table cells; the others go on.

Run it as ``rigbench study peers --out runs/loadgen-peers-<host>-<date>`` (the full run, ~15-20 s
per tool per load); a quick trial: ``--loads 8x100,8x100:k3:j0.5 --warmup 1 --measure 4``.

    loads.py      a load, its syntax, how long each tool drives it, the truth server it runs against
    tools.py      one adapter per tool: its command line and the reader of its figures
    peer_venv.py  each peer installed once in its own virtualenv
    cpu_trace.py  a tool's process tree, run to its end with its CPU sampled
    cells.py      one tool on one load, its figures set against the truth log (``rigbench.fidelity``)
    runner.py     every tool on every load, one at a time
    report.py     README.md's table and method, results.json
"""
