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
what=(--also v6.12+ptdma-claim-once)
# The quick tier (nextest's `quick` profile, `lab test --quick`) boots the base kernel only,
# with the default and `sched` images: no variant, no arm64 kernel, no cross toolchain.
if [ "${NEXTEST_PROFILE:-}" = quick ]; then
  what=(--kernels v6.12 --images sched)
fi
if [ -f .lab-archive ]; then
  lab=${LAB_BIN:-../debug/lab}
  if [ ! -x "$lab" ]; then
    echo "prepare.sh: running from a nextest archive, but $PWD/$lab is missing; set LAB_BIN" >&2
    exit 1
  fi
  exec "$lab" prepare "${what[@]}"
fi
exec cargo run -q -p lab -- prepare "${what[@]}"
