//! Share links: the owner makes one, a signed-in principal who opens it gets the share; it is
//! listed without its secret and revocable, and an expired, used-up, revoked or tampered one
//! opens nothing; only the owner makes them, and bad bodies are refused.

use serde_json::{Value, json};

use crate::common::*;
use crate::repos::rest;
use crate::security::{TOKENS, connect_as, server_with};

/// Alice, Bob and Carol, each with a token.
fn config() -> String {
    format!("{TOKENS}\"tok-carol\" = \"carol\"\n")
}

/// Makes a link to Alice's `plan` with `body`.
async fn make(server: &TestServer, body: Value) -> (u16, Value) {
    rest(
        server,
        Some("tok-alice"),
        "POST",
        "/api/sessions/plan/links",
        Some(body),
    )
    .await
}

/// `token`'s principal opens link `link`.
async fn open(server: &TestServer, token: &str, link: &str) -> (u16, Value) {
    rest(
        server,
        Some(token),
        "POST",
        "/api/links/open",
        Some(json!({"token": link})),
    )
    .await
}

/// Alice's links to `plan`, as she lists them.
async fn links(server: &TestServer) -> Value {
    let (status, list) = get_as(server, "tok-alice", "/api/sessions/plan/links").await;
    assert_eq!(status, 200, "{list}");
    list
}

/// How many times Alice's link `id` was used, as she lists it.
async fn uses(server: &TestServer, id: &str) -> i64 {
    let list = links(server).await;
    let link = list["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"] == id);
    link.and_then(|l| l["uses"].as_i64()).expect("listed")
}

#[tokio::test]
async fn a_link_gives_its_share_until_it_is_used_up_expired_or_revoked() {
    let (server, _cfg) = server_with(&config()).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "first").await;
    alice.until_result("plan").await;

    let (status, link) = make(
        &server,
        json!({"role": "viewer", "expires_in_secs": 3600, "max_uses": 1}),
    )
    .await;
    assert_eq!(status, 201, "{link}");
    let token = link["token"].as_str().unwrap().to_owned();
    assert_eq!(link["url"], format!("/#link={token}"));
    assert_eq!(
        (link["uses"].as_i64(), link["max_uses"].as_i64()),
        (Some(0), Some(1))
    );

    // Bob opens it: the conversation is shared with him as a viewer, under his alias.
    let (status, opened) = open(&server, "tok-bob", &token).await;
    assert_eq!(status, 200, "{opened}");
    assert_eq!(
        (opened["owner"].as_str(), opened["role"].as_str()),
        (Some("alice"), Some("viewer"))
    );
    let alias = opened["agent_id"].as_str().unwrap();
    let (status, _) = get_as(
        &server,
        "tok-bob",
        &format!("/api/sessions/{alias}/messages"),
    )
    .await;
    assert_eq!(status, 200);
    // Used up: Carol gets nothing; the list shows it used, without its secret.
    let (status, err) = open(&server, "tok-carol", &token).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (410, Some("link_expired")),
        "{err}"
    );
    let list = links(&server).await;
    let listed = &list["links"][0];
    assert_eq!(
        (listed["id"].as_str(), listed["uses"].as_i64()),
        (link["id"].as_str(), Some(1))
    );
    assert!(
        !list.to_string().contains(token.split_once('.').unwrap().1),
        "{list}"
    );
    let (_, shares) = get_as(&server, "tok-carol", "/api/shares").await;
    assert_eq!(shares["sessions"], json!([]));

    // A link with no use limit works for several; an editor link raises a viewer to editor.
    let (_, many) = make(&server, json!({"role": "editor", "expires_in_secs": 3600})).await;
    let many = many["token"].as_str().unwrap().to_owned();
    let (status, as_editor) = open(&server, "tok-bob", &many).await;
    assert_eq!((status, as_editor["role"].as_str()), (200, Some("editor")));
    assert_eq!(
        as_editor["agent_id"].as_str(),
        Some(alias),
        "the alias stays"
    );
    // The owner opening their own link gets nothing.
    let (status, err) = open(&server, "tok-alice", &many).await;
    assert_eq!(
        (status, err["code"].as_str()),
        (400, Some("invalid_request"))
    );
    // Tampered: another secret, another id, a cut token, other shapes: all unknown or refused,
    // and none used any of the link.
    let (id, secret) = many.split_once('.').unwrap();
    let flipped = if secret.starts_with('0') { "1" } else { "0" };
    for bad in [
        format!("{id}.{flipped}{}", &secret[1..]),
        format!(
            "{}{}.{secret}",
            if id.starts_with('0') { "1" } else { "0" },
            &id[1..]
        ),
        format!("{id}.{}", &secret[..32]),
        id.to_owned(),
        format!("{id}.{}", secret.to_uppercase()),
        format!("-{id}.{secret}"),
        String::new(),
    ] {
        let (status, err) = open(&server, "tok-carol", &bad).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (404, Some("unknown_link")),
            "{bad}: {err}"
        );
    }
    let (status, _) = open(&server, "tok-carol", &"a".repeat(5000)).await;
    assert_eq!(status, 400);
    assert_eq!(uses(&server, id).await, 1, "only Bob's opening counted");
    // Revoked: it opens nothing more (the shares it gave stay).
    let many_id = id.to_owned();
    let (status, _) = delete_as(
        &server,
        "tok-alice",
        &format!("/api/sessions/plan/links/{many_id}"),
    )
    .await;
    assert_eq!(status, 204);
    let (status, err) = open(&server, "tok-carol", &many).await;
    assert_eq!((status, err["code"].as_str()), (404, Some("unknown_link")));
    let (status, _) = get_as(&server, "tok-bob", &format!("/api/sessions/{alias}")).await;
    assert_eq!(status, 200);

    // Expired: a link of one second, opened after it.
    let (_, short) = make(&server, json!({"role": "viewer", "expires_in_secs": 1})).await;
    let short = short["token"].as_str().unwrap().to_owned();
    // Waiting for the clock, not for an event: the link's time has to pass.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let (status, err) = open(&server, "tok-carol", &short).await;
    assert_eq!((status, err["code"].as_str()), (410, Some("link_expired")));
}

#[tokio::test]
async fn only_the_owner_makes_links_and_bad_bodies_are_refused() {
    let (server, _cfg) = server_with(&config()).await;
    let mut alice = connect_as(&server.addr, "tok-alice").await;
    alice.chat("plan", "first").await;
    alice.until_result("plan").await;
    let alias = crate::teams::share(&server, "alice", "plan", "bob", "editor").await;
    let body = json!({"role": "viewer", "expires_in_secs": 60});
    // An editor may not, and someone it is not shared with gets `unknown_agent`.
    for (token, id, want) in [
        ("tok-bob", alias.as_str(), 403),
        ("tok-carol", "plan", 404),
        ("tok-carol", alias.as_str(), 404),
        ("tok-carol", "~aaaaaaaaaaaaaaaa", 404),
    ] {
        for (method, body) in [("POST", Some(body.clone())), ("GET", None)] {
            let (status, err) = rest(
                &server,
                Some(token),
                method,
                &format!("/api/sessions/{id}/links"),
                body,
            )
            .await;
            assert_eq!(status, want, "{token} {method} {id}: {err}");
        }
    }
    for bad in [
        json!({"role": "owner", "expires_in_secs": 60}),
        json!({"role": "viewer"}),
        json!({"role": "viewer", "expires_in_secs": 0}),
        json!({"role": "viewer", "expires_in_secs": -1}),
        json!({"role": "viewer", "expires_in_secs": 2_592_001}),
        json!({"role": "viewer", "expires_in_secs": 60, "max_uses": 0}),
        json!({"role": "viewer", "expires_in_secs": 60, "max_uses": 1001}),
        json!({"role": "viewer", "expires_in_secs": 60, "max_uses": -5}),
        json!({"role": "viewer", "expires_in_secs": "60"}),
        json!({"role": "viewer", "expires_in_secs": 60, "extra": true}),
        json!(["viewer", 60]),
    ] {
        let (status, err) = make(&server, bad.clone()).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some("invalid_request")),
            "{bad}: {err}"
        );
    }
    assert_eq!(links(&server).await["links"], json!([]), "nothing was made");
}
