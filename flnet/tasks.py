"""One sweep task, whatever runs it: a point's run whose every failure becomes an outcome.

Shared by the local workers (`flnet.workers`), Ray's tasks (`flnet.ray_cluster`) and Slurm's
(`flnet.slurm`), so a point fails the same way on each.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flnet import reuse
from flnet.errors import FlnetError

if TYPE_CHECKING:  # for annotations only: the runner loads torch
    from flnet.runner import Result

Follow = Callable[[str], list[tuple[str, Any]]]  # a finished point's key -> tasks it unlocks


def run_point(data: Any, write: bool = True) -> tuple[dict, Result | None]:
    """Run one resolved scenario (a dict, or a `flnet.reuse.Job`: a replay or a full run with
    a note); every failure becomes an outcome, never an exception.

    Returns (outcome, result): outcome is {"status", "error"}; result is the run's Result
    (None when it failed).
    """
    try:
        result = reuse.run_job(data, write=write)
    except FlnetError as e:
        return {"status": "error", "error": str(e)}, None
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}, None
    return {"status": result.summary["status"], "error": None}, result
