use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    dev: DevArgs,
}

fn args(extra: &[&str]) -> DevArgs {
    let argv = ["hostd-dev"].iter().chain(extra).copied();
    Cli::try_parse_from(argv).expect("dev arguments").dev
}

#[test]
fn the_dev_config_is_the_toml_it_says() {
    let a = args(&["--listen", "0.0.0.0:9443", "--time-scale", "3600"]);
    let lib = r#"/opt/a "quoted" dir\lib.so"#;
    let text = dev_config(&a, lib, "00ff");
    let value: toml::Value = toml::from_str(&text).expect("TOML");
    assert_eq!(value["gpu"]["nvml_library"].as_str(), Some(lib));
    assert_eq!(value["api"]["listen"].as_str(), Some("0.0.0.0:9443"));
    assert_eq!(value["metering"]["time_scale"].as_float(), Some(3600.0));
    assert_eq!(
        value["attestation"]["verifier_keys"][0].as_str(),
        Some("00ff")
    );
}

#[test]
fn profiles_reach_a_wildcard_listener_on_loopback() {
    assert_eq!(
        server_url("0.0.0.0:8443".parse().unwrap()),
        "https://127.0.0.1:8443"
    );
    assert_eq!(
        server_url("127.0.0.2:9000".parse().unwrap()),
        "https://127.0.0.2:9000"
    );
}

#[test]
fn flags_out_of_range_are_refused_in_the_config_s_own_check() {
    for (flag, value) in [
        ("--time-scale", "0.5"),
        ("--time-scale", "NaN"),
        ("--interval", "inf"),
    ] {
        let text = dev_config(&args(&[flag, value]), "/lib.so", "00ff");
        let err =
            Config::from_toml(&text, Path::new("/dev-state/hostd.toml")).expect_err("out of range");
        assert!(
            err.to_string().contains("metering."),
            "{flag} {value}: {err}"
        );
    }
}
