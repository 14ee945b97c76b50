"""Runs many flnet commands in one interpreter (the corpus and the fuzz test are too large for
a process each on two cores): for each case in the JSON file given, `flnet.cli.main` under an
alarm (60 s, or the seconds given after the file), printing one JSON line with its exit status,
its stderr and its stdout. A case is the argument list of `flnet validate`, or {"argv": [...]}
for any command. An exception that escapes `main` is reported as exit status "traceback", the
alarm as "hang".

    python tests/corpus_driver.py cases.json [SECONDS]
"""

import contextlib
import io
import json
import signal
import sys
import traceback


class Hang(BaseException):  # not an Exception: no `except Exception` in flnet swallows it
    pass


def _hang(signum, frame):
    raise Hang()


def main() -> None:
    from flnet.cli import main as cli

    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    signal.signal(signal.SIGALRM, _hang)
    for case in json.load(open(sys.argv[1])):
        argv = case["argv"] if isinstance(case, dict) else ["validate", *case]
        err, out = io.StringIO(), io.StringIO()
        signal.alarm(seconds)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                rc = cli(argv)
        except Hang:
            rc = "hang"
        except SystemExit as e:  # argparse's usage errors, as the real command exits
            rc = e.code
        except BaseException:
            rc, err = "traceback", io.StringIO(err.getvalue() + traceback.format_exc())
        finally:
            signal.alarm(0)
        print(json.dumps({"rc": rc, "stderr": err.getvalue(), "stdout": out.getvalue()}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
