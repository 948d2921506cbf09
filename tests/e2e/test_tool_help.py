#!/usr/bin/python3
"""Every tool's --help lists every option it accepts: the options are read from the tool's source
(tools/<tool>.cpp with '-' as '_', and tools/cli_common.h, which every tool uses) as CLI11
add_option / add_flag names, and each long name must appear in the help text. The tool must also
exit 0 on --help (a tool with subcommands: --help-all) and reject an unknown option with one line
on stderr.

  test_tool_help.py --source-dir DIR --tool NAME=PATH [--tool NAME=PATH ...]
"""
import argparse
import os
import re
import subprocess
import sys

OPTION = re.compile(r'add_(?:option|flag)\(\s*"([^"]+)"')


def declared_options(paths):
    names = set()
    for path in paths:
        with open(path) as f:
            for spec in OPTION.findall(f.read()):
                for name in spec.split(","):
                    name = name.strip()
                    if name.startswith("--"):
                        names.add(name)
                    elif not name.startswith("-"):
                        names.add(name)   # a positional argument
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--tool", action="append", required=True)
    a = ap.parse_args()
    passed = failed = 0
    for spec in a.tool:
        name, path = spec.split("=", 1)
        sources = [os.path.join(a.source_dir, "tools", name.replace("-", "_") + ".cpp"), os.path.join(a.source_dir, "tools", "cli_common.h")]
        options = declared_options(sources)
        r = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
        if "--help-all" in r.stdout:   # a tool with subcommands lists them all under --help-all
            r = subprocess.run([path, "--help-all"], capture_output=True, text=True, timeout=60)
        missing = sorted(o for o in options if o not in r.stdout)
        problems = []
        if r.returncode != 0:
            problems.append(f"--help exits {r.returncode}")
        if len(options) < 4:
            problems.append(f"only {sorted(options)} found in {sources}")
        if missing:
            problems.append(f"--help does not list {missing}")
        bad = subprocess.run([path, "placeholder-argument", "--no-such-option"], capture_output=True, text=True, timeout=60)
        if bad.returncode == 0 or len(bad.stderr.strip().splitlines()) != 1 or "--no-such-option" not in bad.stderr:
            problems.append(f"an unknown option gives exit {bad.returncode} and stderr {bad.stderr!r}")
        if problems:
            failed += 1
            print(f"FAIL {name}: {'; '.join(problems)}")
        else:
            passed += 1
            print(f"PASS {name}: --help lists all {len(options)} options: {' '.join(sorted(options))}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
