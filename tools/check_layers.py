#!/usr/bin/env python3
"""Checks the include rule of docs/ARCHITECTURE.md: a folder under src/ includes only itself and
the folders listed as below it. Exits 1 naming every include that breaks the rule (ctest runs it).

    python3 tools/check_layers.py [src-dir]
"""
import os
import re
import sys

# folder -> the folders it may include (besides itself). Bottom to top.
ALLOWED = {
    "core": set(),
    "kernels": {"core"},
    "io": {"core", "kernels"},  # kernels/dtype.h: the one dtype table widens stored types
    "model": {"core", "kernels", "io"},
    "kv": {"core", "kernels", "model"},
    "engine": {"core", "kernels", "io", "model", "kv"},
    "tokenizer": {"core", "io"},
    # the front ends: the CLI, the HTTP server and the Python extension
    "server": {"core", "kernels", "io", "model", "kv", "engine", "tokenizer"},
    "cli": {"core", "kernels", "io", "model", "kv", "engine", "tokenizer", "server"},
    # the extension reuses the CLI's front-end helpers (cli/common, cli/bench_report: kvlm_frontend)
    "python": {"core", "kernels", "io", "model", "kv", "engine", "tokenizer", "cli"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    bad, seen = [], 0
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder)
        if not os.path.isdir(path):
            continue
        if folder not in ALLOWED:
            bad.append(f"src/{folder}/: a folder the layer table does not know; add it to tools/check_layers.py")
            continue
        for root, _, files in os.walk(path):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp")):
                    continue
                f = os.path.join(root, name)
                with open(f, encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        seen += 1
                        dep = m.group(1)
                        if dep != folder and dep not in ALLOWED[folder]:
                            bad.append(f"{os.path.relpath(f, os.path.dirname(src))}:{n}: {folder}/ includes {dep}/")
    for b in bad:
        print(b)
    print(f"{seen} project includes checked; {len(bad)} break the layer rule")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
