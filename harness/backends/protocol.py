"""The cluster's JSON-lines protocols (the Ray driver's, the worker server's) share one error shape:
a request that fails is answered {"error": {"status": "oom" | "error", "reason": "<one line>"}},
and the caller decides what the failure means (a trial's x, a crash, a lost group)."""
from harness.runs import records


def error(exc: BaseException) -> dict:
    cause = getattr(exc, "cause", None) or exc  # a Ray task error wraps the exception the task raised
    status, reason = records.failure(cause)
    return {"error": {"status": status, "reason": reason}}


def problem(answer) -> tuple[str, str] | None:
    """(status, reason) if the answer is an error, else None."""
    if isinstance(answer, dict) and set(answer) == {"error"}:
        return answer["error"]["status"], answer["error"]["reason"]
    return None


def fullest(answers: list[dict]) -> dict:
    """The first process's answer, with the allocator's peak of the fullest of them where they
    report one ("peak_bytes" of a steps answer; None where any has no count)."""
    first = dict(answers[0])
    if "peak_bytes" in first:
        peaks = [a.get("peak_bytes") for a in answers]
        first["peak_bytes"] = max(peaks) if None not in peaks else None
    return first
