"""SIGTERM tears down as Ctrl-C does: in a pytest session (the suite's plugin) and in a command."""
import signal
import subprocess
import sys
import time


def test_a_pytest_session_ended_by_sigterm_runs_its_teardowns_and_says_it_was_interrupted(tmp_path):
    """A CI job cancelled or a `timeout` sends SIGTERM, which Python's default answers by exiting on
    the spot: an emulated slice's namespaces, its Ray nodes and workers stayed behind (seen in a
    loaded CI check killed so). With the plugin, the session unwinds as on Ctrl-C: the test's own
    `finally` and its fixtures' teardowns run, and pytest reports the session interrupted."""
    started, torn_down = tmp_path / "started", tmp_path / "torn-down"
    (tmp_path / "test_held.py").write_text(f"""
import time
import pytest

@pytest.fixture
def slice_like():
    yield
    with open({str(torn_down)!r}, "a") as f:
        f.write("fixture\\n")

def test_waits_for_the_signal(slice_like):
    try:  # the mark inside the try: a signal just after it, under load, must still find the finally armed
        open({str(started)!r}, "w").close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # waiting to be ended, as a long trial would
            time.sleep(0.05)
    finally:
        with open({str(torn_down)!r}, "a") as f:
            f.write("finally\\n")
""")
    # The suite's plugin loads from its entry point; no conftest of the checkout's is involved.
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir",
                             str(tmp_path), str(tmp_path / "test_held.py")],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), proc.communicate(timeout=30)[0]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert torn_down.read_text().splitlines() == ["finally", "fixture"], out
    assert proc.returncode == 2 and "KeyboardInterrupt" in out, out  # pytest's "interrupted" status
