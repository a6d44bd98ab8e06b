"""CLI commands, one module per command or group.

Each module defines ``register(app: typer.Typer) -> None``; ``rigbench.cli`` discovers the
modules here, so adding a command never edits a shared file.
"""
