"""The cloud loop: every stack's rig from ``pulumi up`` to ``pulumi destroy`` in one command (app layer)."""
