#!/usr/bin/env bash
# Per-launch overhead of the bindings through a bench session whose launch ioctl returns at once
# (3 views, 2 scalars, v2), beside the Rust figures measured the same way in the same run:
#   launch_overhead_ns, rust_kernel_launch_overhead_ns   (cargo example `overhead`)
#   c_launch_overhead_ns                                  (a C program linked to libhexrpc.so)
#   python_launch_overhead_ns                             (the hexrpc wheel; needs PYTHON with it installed)
#   python_model                                          (hexrpc.Model.run of the sample model and of the
#                                                          files in HEXRPC_OVERHEAD_MODELS=a.hxm:b.hxm, beside
#                                                          a raw ioctl measured in the same process)
#   graph_step_host_ns                                    (hexrpc.tinygrad's graph per jit step, 10 kernels,
#                                                          inputs changing every step; also needs tinygrad
#                                                          in PYTHON and the executor's tools)
# All are host time on this machine with a release build (install the wheel built with
# `maturin build --release`); never device figures.
# Usage: PYTHON=/path/to/venv/bin/python bash bindings/bench.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cargo build --locked --release -q -p hexrpc-ffi --lib --example overhead
cc -std=c11 -O2 -Wall -Wextra -Werror -DHEXRPC_BENCH -Ibindings/c/include bindings/c/examples/launch_overhead.c \
  -Ltarget/release -lhexrpc -o "$out/launch_overhead"
rust="$(target/release/examples/overhead)"
c="$(LD_LIBRARY_PATH=target/release "$out/launch_overhead")"
py='{}'
graph='{}'
if [ -n "${PYTHON:-}" ]; then
  py="$("$PYTHON" bindings/python/bench/launch_overhead.py)"
  # hexrpc.Model.run of the sample model (and of HEXRPC_OVERHEAD_MODELS' files), beside a raw ioctl.
  IFS=: read -r -a model_files <<< "${HEXRPC_OVERHEAD_MODELS:-}"
  pymodel="$("$PYTHON" bindings/python/bench/model_overhead.py "${model_files[@]}")"
  py="$(python3 -c 'import json,sys; a=json.loads(sys.argv[1]); a["python_model"]=json.loads(sys.argv[2]); print(json.dumps(a))' "$py" "$pymodel")"
  if "$PYTHON" -c 'import tinygrad' 2>/dev/null && command -v qemu-hexagon >/dev/null; then
    cargo build --locked -q -p hexrpc-android
    graph="$(HEXRPC_CLI="$root/target/debug/hexrpc" CC=clang-19 "$PYTHON" bindings/python/bench/graph_step.py)"
  else
    echo "bench.sh: no tinygrad in PYTHON or no qemu-hexagon; graph_step_host_ns skipped" >&2
  fi
else
  echo "bench.sh: PYTHON not set; python_launch_overhead_ns and graph_step_host_ns skipped" >&2
fi
python3 -c 'import json,sys; d={}; [d.update(json.loads(a)) for a in sys.argv[1:]]; d.pop("launches", None); d.pop("steps", None); print(json.dumps(d, indent=1))' "$rust" "$c" "$py" "$graph"
