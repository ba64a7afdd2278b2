"""Run the ADK example (``sdk/examples/adk_agent.py``) against a console, as a user who
installed the wheel would: ``scripts/sdk_wheel_check.sh`` runs this with the clean virtual
environment's interpreter.

    python sdk/tests/wheel_check.py            # starts the fake console on loopback
    CONSOLE_URL=... CONSOLE_TOKEN=... python sdk/tests/wheel_check.py   # a live console

Checks that ``context_runtime`` comes from site-packages (not the source tree), that the
example answers through the offline model with the assembled context, and (fake console)
that the console got the manifest and one ``ready`` trace. Prints ``OK …`` and exits 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "adk_agent.py"


def main() -> int:
    import context_runtime
    import google.adk

    where = Path(context_runtime.__file__).resolve()
    if "site-packages" not in where.parts:
        print(f"FAIL context_runtime imported from {where}, not the installed wheel")
        return 1
    adk_version = getattr(google.adk, "__version__", "?")
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_API_KEY"}  # the offline model
    # The example's reporter spools in the user's state directory by default: a fresh one here,
    # never the machine's ~/.local/state.
    env.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="wheel-check-state-"))
    console = None
    if "CONSOLE_URL" not in env:
        sys.path.insert(0, str(HERE))
        from fake_console import AGENT, TOKEN, FakeConsole

        console = FakeConsole()
        env.update(CONSOLE_URL=console.url, CONSOLE_TOKEN=TOKEN, CONSOLE_AGENT=AGENT)
    try:
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), "Can I still return order A1042?"],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            timeout=120,
        )
        answer = result.stdout.strip()
        if result.returncode != 0 or not answer.startswith("[offline model]"):
            print(f"FAIL the example answered {answer!r} (exit {result.returncode})")
            print(result.stderr[-3000:])
            return 1
        if console is not None:
            statuses = [trace["status"] for trace in console.stored.values()]
            if statuses != ["ready"] or not console.manifests:
                print(f"FAIL console got traces {statuses} and {len(console.manifests)} manifests")
                return 1
    finally:
        if console is not None:
            console.close()
    print(
        f"OK context-console-runtime {context_runtime.__version__} from {where.parent}, "
        f"google-adk {adk_version}: {answer[:90]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
