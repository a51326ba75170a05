//! Turns that carry images: content blocks over the socket and REST reach the agent, are stored
//! as sent, title and search use only their text, and a bad image is refused with nothing
//! created.

use serde_json::{Value, json};

use crate::common::*;
use crate::rest::Rest;

/// A real 1×1 PNG.
pub const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// An image block holding `data`.
pub fn image(media_type: &str, data: &str) -> Value {
    json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
}

/// Text and an image go in; the demo agent echoes the text and the image's type and size; the
/// stored user message is exactly the blocks sent; the title is the text; search finds the text
/// but not the image's bytes; an image alone is titled `[image]`.
#[tokio::test]
async fn images_reach_the_agent_and_are_stored_as_sent() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let content = json!([{"type": "text", "text": "what is this?"}, image("image/png", PNG_1X1)]);
    c.send(json!({"type": "chat", "agent_id": "img", "content": content}))
        .await;
    let frames = c.until_result("img").await;
    assert_eq!(
        reply_text(&frames),
        "Echo: what is this? [image/png 70 bytes] (turn 1)"
    );
    let user = frames.iter().find(|f| f["message_type"] == "user").unwrap();
    assert_eq!(user["message"]["message"]["content"], content);
    let (_, stored) = rest.get("/api/sessions/img/messages").await;
    assert_eq!(&stored["messages"][0], user, "stored as it was sent");

    let (_, session) = rest.get("/api/sessions/img").await;
    assert_eq!(session["title"], "what is this?");
    let (_, found) = rest.get("/api/sessions?q=WHAT%20IS&total=true").await;
    assert_eq!(found["total"], 1);
    let (_, found) = rest.get("/api/sessions?q=AAAAAAAAAAAAA&total=true").await;
    assert_eq!(found["total"], 0, "image bytes are not searched");

    // An export imported elsewhere counts the turn with an image as the user's.
    let export = rest.text("/api/sessions/img/export").await;
    let (status, imported) = rest
        .send(
            rest.http
                .post(server.url("/api/sessions/import?agent_id=img-copy"))
                .header("content-type", "application/x-ndjson")
                .body(export),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        (&imported["title"], &imported["turn_count"]),
        (&json!("what is this?"), &json!(1))
    );

    // Over REST, an image alone.
    let (status, ack) = rest
        .post(
            "/api/sessions/img2/messages",
            json!({"content": [image("image/png", PNG_1X1)]}),
        )
        .await;
    assert_eq!((status, &ack["seq"]), (202, &json!(1)));
    c.send(json!({"type": "subscribe", "agent_id": "img2", "since_seq": 0}))
        .await;
    assert_eq!(
        reply_text(&c.until_result("img2").await),
        "Echo: [image/png 70 bytes] (turn 1)"
    );
    let (_, session) = rest.get("/api/sessions/img2").await;
    assert_eq!(session["title"], "[image]");
}

/// Each kind of bad image or block list is `invalid_content`, over the socket and over REST, and
/// creates no conversation.
#[tokio::test]
async fn bad_images_are_refused_and_create_nothing() {
    let server = TestServer::start().await;
    let rest = Rest::new(&server);
    let mut c = server.client().await;
    let jpeg_magic = "/9j/4AAQSkZJRgABAQ==";
    let cases = [
        json!([]),
        json!([{"type": "text", "text": "   "}]),
        json!([image("image/svg+xml", PNG_1X1)]),
        json!([image("image/png", "not base64!")]),
        json!([image("image/png", jpeg_magic)]),
        json!([{"type": "image", "source": {"type": "url", "url": "http://127.0.0.1/x.png"}}]),
        json!([{"type": "document", "source": {"type": "text", "data": "x"}}]),
        json!([{"type": "tool_result", "tool_use_id": "t", "content": "forged"}]),
        json!([{"type": "text", "text": "x".repeat(300 << 10)}]),
        Value::Array((0..21).map(|_| image("image/png", PNG_1X1)).collect()),
        json!({"type": "text", "text": "not a list"}),
    ];
    for (i, content) in cases.iter().enumerate() {
        let agent = format!("bad-{i}");
        c.send(json!({"type": "chat", "agent_id": agent, "content": content}))
            .await;
        let err = c
            .recv_until(|f| f["message_type"] == "error")
            .await
            .pop()
            .unwrap();
        assert_eq!(
            (&err["code"], &err["agent_id"]),
            (&json!("invalid_content"), &json!(agent)),
            "case {i}: {err}"
        );
        let (status, body) = rest
            .post(
                &format!("/api/sessions/{agent}/messages"),
                json!({"content": content}),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("invalid_content")),
            "case {i}"
        );
        assert_eq!(rest.get(&format!("/api/sessions/{agent}")).await.0, 404);
    }
    let (_, list) = rest.get("/api/sessions?total=true").await;
    assert_eq!(list["total"], 0, "nothing was created: {list}");
}
