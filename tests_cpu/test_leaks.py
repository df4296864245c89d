"""The leak checks (tests_cpu/leaks.py) see what runs, wherever the checkout lies."""
import subprocess
import sys

from tests_cpu.leaks import command_lines


def test_a_process_is_seen_by_its_whole_command_line_however_long():
    # As a raylet started from a venv under a long path: the word that identifies it comes last,
    # well past the 80 columns ps would cut a line at.
    padding = "x" * 200
    marker = "harness-leaks-test-marker"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", padding, marker])
    try:
        assert any(line.endswith(f"{padding} {marker}") for line in command_lines())
    finally:
        proc.kill()
        proc.wait()
