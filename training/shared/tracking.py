"""MLflow for a job's scalars, set the way an MLflow user sets it: `MLFLOW_TRACKING_URI` (and, if wanted,
`MLFLOW_EXPERIMENT_NAME`) in the job file's `env:`. Its controller then sends the points it writes to
TensorBoard to that MLflow too (training.control.mlflow_sink). The URI is checked when the job file is read,
at `train`, so a typo is refused before a cluster is rented, not found in the head's log hours later.

The forms are MLflow's own (https://mlflow.org/docs/latest/self-hosting/architecture/tracking-server/ and
https://mlflow.org/docs/latest/api_reference/python_api/mlflow.html#mlflow.set_tracking_uri): a tracking
server (http[s]://HOST[:PORT][/PATH]), Databricks (`databricks` or `databricks://PROFILE`), a database store
(sqlite:///PATH, postgresql://..., mysql://..., mssql://...) or a local directory (file:///ABSOLUTE/PATH) on
the machine the controller runs on.
"""

from __future__ import annotations

from urllib.parse import urlsplit

TRACKING_URI = "MLFLOW_TRACKING_URI"
EXPERIMENT = "MLFLOW_EXPERIMENT_NAME"
_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")


def tracking_uri_problem(uri: str) -> str | None:
    """Why `uri` is no MLflow tracking URI (None: it is one)."""
    parts = urlsplit(uri)
    if parts.scheme in ("http", "https") and parts.hostname:
        return None
    if uri == "databricks" or (parts.scheme == "databricks" and not parts.path.strip("/")):
        return None
    if parts.scheme == "file" and parts.path.startswith("/") and parts.netloc in ("", "localhost"):
        return None
    if parts.scheme.split("+")[0] in _DATABASES and "://" in uri:
        return None
    return (
        f"{TRACKING_URI} must be an MLflow tracking URI: http[s]://HOST[:PORT], databricks[://PROFILE], "
        f"sqlite:///PATH (or another database's URL) or file:///ABSOLUTE/PATH, got {uri!r}"
    )


def checked_env(env: dict[str, str]) -> dict[str, str]:
    """The job file's `env:`, its MLflow tracking URI (if any) checked."""
    problem = tracking_uri_problem(env[TRACKING_URI]) if env.get(TRACKING_URI) else None
    if problem:
        raise ValueError(problem)
    return env
