# The verbs a person types. Each is a thin wrapper over cargo; the README shows the cargo forms
# for machines without `just`.

# Provision QEMU, the default kernel and guest image, and show what the host offers.
setup:
    cargo run -p lab -- doctor

# The whole test suite (VM tests run under TCG where KVM cannot boot guests); arguments go to
# `cargo nextest run --workspace`, e.g. `just test -E 'binary(vm)'`.
test *args:
    cargo run -p lab -- test {{args}}

# The main job: seed S1 side by side on the default topology and kernels.
demo:
    cargo run -p lab -- compare

# Formatting and lints, as CI would like them.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# Property tests of the device models with many more cases than CI runs.
fuzz cases="20000":
    PROPTEST_CASES={{cases}} cargo test -p lab-dma --release -- --nocapture

# The stored comparison tables; `just report --html` writes their pages.
report *args:
    cargo run -p lab -- report {{args}}

# Bisect S1's six-patch series (images/kernels/v6.12+s1-series.toml): the culprit is patch 4.
# dmatest with 128 KiB buffers, as S1's tests run it under TCG (tests/dma_wakeup.rs says why);
# `just bisect-s1 --set dmatest.test_buf_size=1048576` runs the seed's 1 MiB (about twice as long).
bisect-s1 *args:
    cargo run -p lab -- bisect dma-wakeup --good v6.12 --bad v6.12+s1-series --set dmatest.test_buf_size=131072 {{args}}

# The same series as a git range: a temporary git tree of the cached v6.12 source with one
# commit per patch, bisected with --git-recipe (its good end builds cold once: ~25 min in all).
bisect-s1-git:
    cargo build -p lab
    cargo run -p lab -- test -p lab-scenarios --test bisect --run-ignored only -E 'test(=bisect_finds_the_s1_change_in_a_git_range)' --no-capture

# Seed S4's open question: which of v6.12's four VMA-scan relaxations keeps numa01 scanned
# (images/kernels/v6.12+numa-scan-series.toml), decided on PTE updates.
bisect-s4 *args:
    cargo run -p lab -- bisect numa-scan --good v6.12 --bad v6.12+numa-scan-series {{args}}

# Run the S1 cross-LLC placement test N times in a row and count passes.
soak n="10":
    #!/usr/bin/env bash
    pass=0
    for i in $(seq {{n}}); do
      if cargo run -q -p lab -- test -p lab-scenarios --test dma_wakeup cross_llc --no-fail-fast; then pass=$((pass+1)); fi
      echo "soak: $pass/$i passed"
    done
    echo "soak: $pass/{{n}} passed"

# The lab's speed, every row of its targets from one run: `lab run -- true` against a
# hand-written QEMU line (lab overhead, ratio), kernel build times from the cache, and the suite
# from the last nextest run's JUnit report. `just bench --cold` builds the kernels now (minutes);
# `just bench run|kernel|suite|boot` measures one part.
bench *args:
    cargo run -p lab -- bench {{args}}

# Runs the whole suite (about half an hour on two cores), then prints its timings.
bench-suite:
    #!/usr/bin/env bash
    cargo run -q -p lab -- test; status=$?
    cargo run -q -p lab -- bench suite
    exit $status

# A fresh machine whose LAB_CACHE_REMOTE holds the keys, to the first S1 table, timed: this
# host's cache pushed to a docker-registry on 127.0.0.1, then a clone with an empty target,
# CARGO_HOME and lab cache runs the README's first command (.ci/first-table-remote says how).
bench-first-table-remote *args:
    .ci/first-table-remote {{args}}
