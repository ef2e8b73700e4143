"""The root command as a user meets it: --version, help without `<bool>` after flags, shell completion."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

from conftest import REPO, run_cli


def test_version_prints_the_installed_version():
    """A process of its own: the entry point's exit status and the installed package's metadata."""
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"deepvm {version('deepvm')}"


def test_flags_show_no_type_but_options_with_values_do(cli):
    result = cli("plan", "--help", env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    assert "<bool>" not in result.stdout
    offline = next(line for line in result.stdout.splitlines() if "--offline" in line)
    assert "Use the built-in price" in offline
    max_price = next(line for line in result.stdout.splitlines() if "--max-price" in line)
    assert "<float>" in max_price


def test_bash_completion_completes_commands_and_flags():
    def complete(words: str) -> list[str]:
        env = dict(
            os.environ, COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - 1), _DEEPVM_COMPLETE="complete_bash"
        )
        # the completion variable is named after the program, so run the console script's entry as `deepvm`
        code = "import sys; sys.argv[0] = 'deepvm'; from deepvm_cli.main import run; run()"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert "plan" in complete("deepvm pl")
    assert complete("deepvm plan --off") == ["--offline"]


def test_a_log_into_a_pipe_whose_reader_left_ends_quietly():
    """`deepvm logs JOB | head`: a reader that leaves before the log ends is no internal error (rich's own output
    ends so already: quietly, exit 1)."""
    lines = "from deepvm_cli.ui import console\nfor _ in range(100_000):\n    console.verbatim('a script line')\n"
    proc = subprocess.Popen([sys.executable, "-c", lines], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and b"Error" not in err, err
