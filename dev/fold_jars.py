"""Fold library jars into a folder of compiled classes, to be jarred as one jar.

`make build` uses it to put grpc-java (the dispatcher's client, var/jars/grpc) into
build/uatu-jvm.jar, so the project still ships one jar of its own. Every entry is copied
except the jars' manifests and signatures; `META-INF/services/*` files, which several jars
declare under the same name (grpc-java finds its transports, name resolvers and load
balancers through them), are concatenated instead of overwritten.

Usage: python -m dev.fold_jars <classes-dir> <jar> [<jar> ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from pathlib import Path

SERVICES = "META-INF/services/"
# A jar's own manifest and its signature files describe that jar, not the folded one.
_SKIP = re.compile(r"^META-INF/(MANIFEST\.MF|INDEX\.LIST|[^/]+\.(SF|DSA|RSA|EC))$", re.IGNORECASE)


def fold(classes: Path, jars: list[Path]) -> dict[str, int]:
    """Copy the jars' entries under `classes`; returns {service file: provider lines}."""
    services: dict[str, list[str]] = {}
    for jar in jars:
        with zipfile.ZipFile(jar) as archive:
            for info in archive.infolist():
                name = info.filename
                if info.is_dir() or _SKIP.match(name):
                    continue
                data = archive.read(info)
                if name.startswith(SERVICES):
                    lines = services.setdefault(name, [])
                    for line in data.decode("utf-8").splitlines():
                        entry = line.split("#", 1)[0].strip()
                        if entry and entry not in lines:
                            lines.append(entry)
                    continue
                target = classes / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
    for name, lines in services.items():
        target = classes / name
        existing = target.read_text().splitlines() if target.exists() else []
        merged = existing + [line for line in lines if line not in existing]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("".join(f"{line}\n" for line in merged))
    return {name: len(lines) for name, lines in services.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("classes", type=Path, help="folder of compiled classes to add to")
    parser.add_argument("jars", type=Path, nargs="+", help="jars to fold in")
    args = parser.parse_args(argv)
    missing = [str(j) for j in args.jars if not j.is_file()]
    if missing:
        print(f"no such jar: {', '.join(missing)}", file=sys.stderr)
        return 1
    services = fold(args.classes, args.jars)
    print(f"folded {len(args.jars)} jars into {args.classes} ({len(services)} service files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
