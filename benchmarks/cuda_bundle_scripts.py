"""The two device-side scripts ``benchmarks.cuda_bundle`` writes beside its parts.

Both find their part beside themselves and take ROOT (default /root: where part 0 waits between
the calls and the site is unpacked) and PY (default python3) from the environment, so that they
can be tried on any machine. Run them from the repository root: go.sh makes that folder
importable as ``attnserve``.
"""

# Call 1: part 0 kept outside the checkout, where it outlives the call while the machine stays
# warm, and what the machine has (read from package metadata: importing torch takes seconds).
STASH_SH = r"""#!/bin/bash
# Call 1 of the GPU run: keep part 0 in $ROOT/parts for call 2, and say what the machine has.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=${ROOT:-/root}
PY=${PY:-python3}
if ! { mkdir -p "$ROOT/parts" && cp "$HERE/part.0" "$ROOT/parts/part.0"; }; then
  echo "COULD NOT KEEP PART 0 in $ROOT/parts"
  exit 3
fi
ls -la "$ROOT/parts"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
fi
$PY - <<'PY'
import sys
from importlib import metadata

print(sys.version.split()[0], sys.executable)
for name in ("numpy", "torch", "onnx", "onnxruntime", "onnxruntime-gpu", "grpcio", "protobuf"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "missing")
PY
echo "part 0 kept: run call 2 (go.sh) within 30 s"
"""

# Call 2: part 0 from call 1 + part 1 checked against SHA256, unpacked to $ROOT/site; the
# checkout linked as $ROOT/ns/attnserve with a dist-info (importlib.metadata finds the version
# there); then the command given, or the full cuda_checks run into $OUT. DRY=1 stops after the
# import check.
GO_SH = r"""#!/bin/bash
# Call 2 of the GPU run: part 0 (kept by call 1) + part 1 -> $ROOT/site, this checkout importable
# as attnserve, then the command given (default: python -m benchmarks.cuda_checks into $OUT).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PY:-python3}
ROOT=${ROOT:-/root}
OUTDIR=${OUT:-/tmp/out}
listed() { grep " $1\$" "$HERE/SHA256" | cut -d' ' -f1; }
if [ ! -f "$ROOT/parts/part.0" ]; then
  echo "PART 0 MISSING in $ROOT/parts: a fresh machine; carry a/ and run stash.sh first, then this within 30 s"
  exit 3
fi
if [ "$(sha256sum < "$ROOT/parts/part.0" | cut -d' ' -f1)" != "$(listed part.0)" ]; then
  echo "PART 0 IN $ROOT/parts IS NOT THIS BUNDLE'S: run call 1 again with this bundle's a/"
  exit 4
fi
if [ "$(cat "$ROOT/parts/part.0" "$HERE/part.1" | sha256sum | cut -d' ' -f1)" != "$(listed bundle.tar.xz)" ]; then
  echo "BUNDLE CHECKSUM BAD: part 1 is not this bundle's"
  exit 4
fi
rm -rf "$ROOT/site"
cat "$ROOT/parts/part.0" "$HERE/part.1" | xz -dc -T0 | tar -x -C "$ROOT" || { echo "UNPACK FAILED"; exit 5; }
mkdir -p "$ROOT/ns/attnserve-0.1.0.dist-info"
ln -sfn "$PWD" "$ROOT/ns/attnserve"
printf 'Metadata-Version: 2.1\nName: attnserve\nVersion: 0.1.0\n' > "$ROOT/ns/attnserve-0.1.0.dist-info/METADATA"
export PYTHONPATH=$ROOT/site:$ROOT/ns PYTHONUNBUFFERED=1
$PY -c "import onnxruntime as o, grpc, google.protobuf as p
print('ort', o.__version__, o.__file__, o.get_available_providers(), end=' ')
print('grpc', grpc.__version__, 'protobuf', p.__version__)
" || exit 6
[ -n "${DRY:-}" ] && exit 0
if [ $# -gt 0 ]; then
  "$@"
  rc=$?
  echo "rc $rc"
  exit $rc
fi
mkdir -p "$OUTDIR"
$PY -m benchmarks.cuda_checks --out "$OUTDIR" --work-dir "$ROOT/work" --budget-s "${BUDGET:-470}" \
  --steps env kv-inplace pytest-gpu server decode-graphs verify-fp16 decode-cuda iobinding \
  --client-procs 8 --server-workers 4 2>&1 | tee "$OUTDIR/log.txt"
echo "cuda_checks rc ${PIPESTATUS[0]}"
"""
