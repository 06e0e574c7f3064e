"""What installing towerflow downloads: the base install and what each extra
adds, in MB, for this machine's Python and platform. A table and JSON
(default: benchmarks/results/install_sizes.json).

    python benchmarks/install_sizes.py [--extras cuda12,mpi,recipes,test,docs]

pip resolves each install as on a fresh machine (``--dry-run --ignore-installed
--report``, run from the checkout); each file's size is its download's
Content-Length (a local wheel's size on disk). Needs the package index.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resolved(spec):
    """{package: download URL} of what ``pip install spec`` would fetch."""
    with tempfile.TemporaryDirectory() as scratch:
        report = os.path.join(scratch, "report.json")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run",
                        "--ignore-installed", "--report", report, spec], check=True, cwd=ROOT)
        with open(report) as source:
            found = json.load(source)["install"]
    return {item["metadata"]["name"]: item["download_info"]["url"] for item in found
            if item["metadata"]["name"] != "towerflow"}


def download_bytes(url):
    if url.startswith("file://"):
        return os.path.getsize(url[len("file://"):])
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30) as reply:
        return int(reply.headers["Content-Length"])


def megabytes(packages):
    return round(sum(download_bytes(url) for url in packages.values()) / 1e6, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="cuda12,mpi,recipes,test,docs")
    parser.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results",
                                                       "install_sizes.json"))
    args = parser.parse_args()
    base = resolved(".")
    rows = [{"install": "towerflow", "packages": len(base), "MB": megabytes(base)}]
    for extra in args.extras.split(","):
        added = {name: url for name, url in resolved(f".[{extra}]").items() if name not in base}
        rows.append({"install": f"towerflow[{extra}] adds", "packages": len(added),
                     "MB": megabytes(added), "names": sorted(added)})
    print(f"{'install':<28} {'packages':>8} {'MB':>8}")
    for row in rows:
        print(f"{row['install']:<28} {row['packages']:>8} {row['MB']:>8.1f}")
    machine = {"python": platform.python_version(), "platform": platform.platform(),
               "date": datetime.date.today().isoformat()}
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as out:
        json.dump({"benchmark": "install_sizes", "machine": machine, "rows": rows}, out, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
