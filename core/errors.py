"""One error base class, one subclass per stage.

    RigbenchError
    ├── UsageError        a command-line value is malformed (a list option, a flag's value)
    ├── ProfileError      a rig profile is missing, unreadable or invalid
    ├── RunDirError       a run directory is missing, damaged or of an unknown schema
    ├── InfraError        stack configuration refused before any resource is created
    ├── ProvisionError    a provisioning step on a rig failed
    ├── LlamaCppError     llama.cpp on this machine (build, server, llama-bench) failed
    ├── LoadTestError     the load generator could not run or stopped the sweep
    │   └── RunIncomplete a run was made but did not complete (failed or interrupted; records kept)
    │       └── RunInterrupted  stopped by Ctrl-C or a signal: a loop of runs stops too, not only this run
    ├── QualityError      an eval could not ask its questions (the server stopped answering)
    ├── CloudError        the cloud loop refused its input, or a rig of it did not finish
    ├── StudyError        a study (``rigbench study …``) began but a part of it failed
    └── AnalysisError     records or prices cannot give the asked figure

Every message says what was found, what was expected and what to do; the CLI prints it
as one line, without a traceback, and exits with the error's ``exit_code``: 2 when the input
was refused before anything was created, 1 when a run was made but did not complete.
"""


class RigbenchError(Exception):
    """Base class of every error rigbench raises on purpose."""

    exit_code = 2


class UsageError(RigbenchError):
    pass


class ProfileError(RigbenchError):
    pass


class RunDirError(RigbenchError):
    pass


class InfraError(RigbenchError):
    pass


class ProvisionError(RigbenchError):
    pass


class LlamaCppError(RigbenchError):
    pass


class LoadTestError(RigbenchError):
    pass


class RunIncomplete(LoadTestError):
    exit_code = 1


class RunInterrupted(RunIncomplete):
    pass


class CloudError(RigbenchError):
    pass


class QualityError(RigbenchError):
    exit_code = 1  # raised once an eval folder exists: its answers are kept, a rerun resumes


class StudyError(RigbenchError):
    exit_code = 1  # raised once a study's folder exists: what it measured before the failure is kept


class AnalysisError(RigbenchError):
    pass
