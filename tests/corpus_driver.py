"""Runs many `flnet validate` cases in one interpreter (the corpus is too large for a process
each on two cores): for each argument list in the JSON file given, `flnet.cli.main` under a
60 s alarm, printing one JSON line with its exit status and its stderr. An exception that
escapes `main` is reported as exit status "traceback"."""

import contextlib
import io
import json
import signal
import sys
import traceback


def _hang(signum, frame):
    raise TimeoutError("hang guard: over 60 s")


def main() -> None:
    from flnet.cli import main as cli

    signal.signal(signal.SIGALRM, _hang)
    for argv in json.load(open(sys.argv[1])):
        err, out = io.StringIO(), io.StringIO()
        signal.alarm(60)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                rc = cli(["validate", *argv])
        except BaseException:
            rc, err = "traceback", io.StringIO(err.getvalue() + traceback.format_exc())
        finally:
            signal.alarm(0)
        print(json.dumps({"rc": rc, "stderr": err.getvalue()}), flush=True)


if __name__ == "__main__":
    main()
