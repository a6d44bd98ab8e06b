"""The rigbench tab of Locust's web UI: each step's output tok/s and TTFT while the sweep runs.

Uses the hooks Locust's web UI offers a locustfile: extra template values declare a tab, its
table and a CSV download, and the ``/stats/requests`` answer the UI polls carries the rows.
Imported only inside the Locust process (it needs Flask's request object).
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response, request

from loadtest.live_stats import COLUMNS, LiveStats

TAB = "rigbench-steps"
CSV_ROUTE = "/rigbench/steps.csv"


def install(web_ui: Any, live: LiveStats) -> None:
    """Add the tab, showing ``live``'s rows, to a running web UI (template values survive Locust's own
    updates)."""
    web_ui.template_args["extended_tabs"] = [{"title": "rigbench: tok/s and TTFT per step", "key": TAB}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB, "structure": [{"key": key, "title": title} for key, title in COLUMNS]}
    ]
    web_ui.template_args["extended_csv_files"] = [{"href": CSV_ROUTE, "title": "rigbench: per-step figures (CSV)"}]

    @web_ui.app.after_request
    def add_step_rows(response: Response) -> Response:
        if request.path != "/stats/requests" or not response.is_json:
            return response
        body = response.get_json()
        body["extended_stats"] = [{"key": TAB, "data": live.rows()}]
        response.set_data(json.dumps(body))
        return response

    @web_ui.app.route(CSV_ROUTE)
    def step_csv() -> Response:
        return Response(
            live.csv_text(),
            mimetype="text/csv",
            headers={"Content-Disposition": "attachment; filename=rigbench_steps.csv"},
        )
