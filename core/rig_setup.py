"""Where a cloud rig's own set-up (the stack's user data, infra/templates/user_data.sh) reports.

The user data writes the marker when the rig is ready; the stack exports its path
(``setupMarker``) and provision waits for it, so the one path lives here, below both.
"""

SETUP_MARKER = "/var/lib/rigbench/setup-complete.json"
SETUP_LOG = "/var/log/rigbench-setup.log"
