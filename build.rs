//! Rebuilds the server when a migration is added (the migrations are embedded at compile time),
//! and tells the integration tests which services they need are not configured here.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    // A test that needs a service nobody configured shows as ignored, saying which, instead of
    // passing without running; under CI it runs, and fails for the missing service.
    let ci = std::env::var("CI").as_deref() == Ok("true");
    println!("cargo:rerun-if-env-changed=CI");
    for (var, cfg) in [
        ("AGENTMUX_TEST_PG_URL", "no_test_pg"),
        ("AGENTMUX_TEST_NATS_BIN", "no_test_nats"),
        ("AGENTMUX_TEST_CLAUDE_BIN", "no_test_claude"),
        ("AGENTMUX_TEST_ACP_ADAPTER", "no_test_acp"),
        (
            "AGENTMUX_TEST_OPENAPI_VALIDATOR",
            "no_test_openapi_validator",
        ),
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        println!("cargo:rerun-if-env-changed={var}");
        if !ci && std::env::var_os(var).is_none_or(|v| v.is_empty()) {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}
