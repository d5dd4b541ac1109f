"""Generate the checked-in Python stubs from proto/ (run by ``make proto``).

The generated modules live under ``beam_nominal/_wire/_proto`` so that users need no code
generation. protoc writes absolute imports (``from nominal.channel_writer.v1 import ...``); those
are rewritten to point inside our package, so that our copy never shadows or collides with a
top-level ``nominal`` package a user may also have installed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "beam_nominal" / "_wire" / "_proto"
PACKAGE = "beam_nominal._wire._proto"
_IMPORT = re.compile(r"^from (nominal|beam_nominal\.local)((?:\.\w+)*) import (\w+)", re.MULTILINE)


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc  # dev dependency only

    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={tmp}",
                f"--pyi_out={tmp}", f"--grpc_python_out={tmp}", *protos]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.mkdir(parents=True)
        (out_dir / "__init__.py").write_text('"""Generated protobuf and gRPC stubs (make proto). Do not edit."""\n')
        for src in sorted(Path(tmp).rglob("*")):
            rel = src.relative_to(tmp)
            dst = out_dir / rel
            if src.is_dir():
                dst.mkdir(parents=True, exist_ok=True)
                (dst / "__init__.py").write_text("")
                continue
            text = src.read_text()
            text = _IMPORT.sub(lambda m: f"from {PACKAGE}.{m.group(1)}{m.group(2)} import {m.group(3)}", text)
            dst.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the checked-in stubs are stale")
    ns = parser.parse_args()
    if not ns.check:
        generate(OUT_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "_proto"
        generate(fresh)
        stale = []
        names = {p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file()}
        names |= {p.relative_to(OUT_DIR) for p in OUT_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
        for rel in sorted(names):
            a, b = fresh / rel, OUT_DIR / rel
            if not a.exists() or not b.exists() or a.read_bytes() != b.read_bytes():
                stale.append(str(rel))
        if stale:
            print("stale generated code, run `make proto`:", *stale, sep="\n  ")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
