//! Rebuilds the server when a migration is added (the migrations are embedded at compile time),
//! and tells the integration tests which services they need are not configured here, and
//! which store their servers run on.
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
    // The pass with every test server on PostgreSQL: the tests about the SQLite file itself
    // show as ignored there, saying so, instead of passing without running.
    println!("cargo::rustc-check-cfg=cfg(test_store_postgres)");
    println!("cargo:rerun-if-env-changed=AGENTMUX_TEST_STORE");
    if std::env::var("AGENTMUX_TEST_STORE").as_deref() == Ok("postgres") {
        println!("cargo:rustc-cfg=test_store_postgres");
    }
}
