//! Every guest program says its flags: `--help` prints them and exits 0, a wrong flag exits 2
//! with the usage (issue X1: the flags were only in the sources).

use std::process::Command;

fn run(program: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(program).args(args).output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn the_guest_programs_print_their_flags() {
    let programs = [
        (
            env!("CARGO_BIN_EXE_lab-udp-sink"),
            &["--port", "--count", "--idle-ms", "--ready"][..],
        ),
        (
            env!("CARGO_BIN_EXE_lab-numa01"),
            &["--mib", "--processes", "--threads", "--loops", "--seconds"][..],
        ),
    ];
    for (program, flags) in programs {
        for help in ["--help", "-h"] {
            let (code, stdout, _) = run(program, &[help]);
            assert_eq!(code, 0, "{program} {help}");
            for flag in flags {
                assert!(
                    stdout.contains(flag),
                    "{program} {help} lacks {flag}:\n{stdout}"
                );
            }
        }
        let (code, _, stderr) = run(program, &["--no-such-flag"]);
        assert_eq!(code, 2, "{program}: {stderr}");
        assert!(stderr.contains("usage:"), "{program}: {stderr}");
    }
}
