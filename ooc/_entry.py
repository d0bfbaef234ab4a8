"""The ``ooc`` program's entry point.

Loading the command line takes a moment (the compiled kernels, NumPy, Zarr); a Ctrl-C or SIGTERM
in that moment ends the program at once with status 130 and one line, not a traceback or a
silent death by signal: nothing has been written yet. Once loaded, both signals stop a command
cleanly (``KeyboardInterrupt``: temporaries removed, the last checkpoint intact, status 130).
"""

import os
import signal
import sys


def _quit_while_loading(signum, frame):
    os.write(2, b"ooc: interrupted\n")
    os._exit(130)


def main():
    signal.signal(signal.SIGINT, _quit_while_loading)
    signal.signal(signal.SIGTERM, _quit_while_loading)
    from .cli import main as cli_main
    from .interrupts import handler

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    try:
        cli_main()
    except KeyboardInterrupt:  # between the handlers above and the command's own error handling
        print("ooc: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        # the command is over, its outputs are in place: a signal now would only interrupt the
        # interpreter's shutdown (joining finished threads) and turn the exit status into a death by signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
