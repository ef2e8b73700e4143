"""Two of moto's per-request costs paid once per server: the sandbox's control plane and the tests' moto
server route every EC2, IAM, S3 and SSM call of deepvm through them.

Both depend on moto's installed code alone, never on a request: `backends.list_of_moto_modules` lists moto's
package folders (os.listdir and a stat per folder) on every request to route it by host name, and
`responses.method_names_from_class` lists a response class's methods (inspect.getmembers) on every request
to find its action. py-spy on the test suite's in-process moto server: of 54 s in moto's request handling,
9.6 s and 7.6 s went to these two. `benchmarks/sandbox_api_bench.py` measures the same calls with and without.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

_installed = False


def install() -> None:
    """Answer both from what moto's installed code gave the first time (once per process)."""
    global _installed
    if _installed:
        return
    from moto import backends
    from moto.core import responses

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules  # werkzeug_app reads it through the module, per request
    responses.method_names_from_class = _per_class(responses.method_names_from_class)
    _installed = True


def _per_class(names_of: Callable[[object], list[str]]) -> Callable[[object], list[str]]:
    once = functools.cache(lambda clazz: tuple(names_of(clazz)))
    return lambda clazz: list(once(clazz))  # a list of its own to each caller, as moto's gives
