#!/usr/bin/env bash
# nextest setup script: provision QEMU, build the default kernels and images before any VM test
# starts, so no test spends its time budget on a cold kernel build.
#
# nextest runs it from the workspace root. In a checkout that is the repository and cargo builds
# and runs `lab`; run from a `cargo nextest archive` (.ci/archive) it is the sources unpacked
# from the archive (`--workspace-remap <dir>/target/lab-src`), marked by `.lab-archive`, and the
# archived `lab` binary beside them runs: such a machine needs no cargo and builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
# Besides the kernels of the shipped scenarios' default comparisons (what `lab prepare` builds
# by itself): the ptdma fix tests/dma_engines.rs boots.
extra=(v6.12+ptdma-claim-once)
if [ -f .lab-archive ]; then
  lab=${LAB_BIN:-../debug/lab}
  if [ ! -x "$lab" ]; then
    echo "prepare.sh: running from a nextest archive, but $PWD/$lab is missing; set LAB_BIN" >&2
    exit 1
  fi
  exec "$lab" prepare --also "${extra[@]}"
fi
exec cargo run -q -p lab -- prepare --also "${extra[@]}"
