#!/usr/bin/env bash
# nextest setup script: provision QEMU, build the default kernels and images before any VM test
# starts, so no test spends its time budget on a cold kernel build.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run -q -p lab -- prepare
