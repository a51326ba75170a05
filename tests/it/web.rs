//! The embedded web UI over HTTP: its files are sent compressed when the client accepts it, and
//! carry an `ETag`, so that a reload revalidates them (`304`) instead of fetching them again.

use std::io::Read as _;
use std::path::Path;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT_ENCODING, CONTENT_ENCODING, ETAG, IF_NONE_MATCH, VARY};

use crate::common::*;

/// The file `name` of `web/` as it is in the repository.
fn source(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("web").join(name)).unwrap()
}

/// A browser that accepts gzip gets each file gzip-compressed, smaller and unchanged once
/// unpacked; one that accepts brotli gets brotli; one that accepts neither gets the file as it
/// is. Every answer names its representation's `ETag` and varies on `Accept-Encoding`.
#[tokio::test]
#[cfg_attr(
    test_store_postgres,
    ignore = "not about the store: run in the SQLite pass"
)]
async fn the_ui_files_are_sent_compressed_to_whoever_accepts_it() {
    let server = TestServer::start().await;
    let http = reqwest::Client::new();
    for (path, file) in [
        ("/", "index.html"),
        ("/assets/app.js", "app.js"),
        ("/assets/ui/view.js", "ui/view.js"),
        ("/assets/app.css", "app.css"),
    ] {
        let original = source(file);
        let get = |encoding: Option<&'static str>| {
            let mut request = http.get(server.url(path));
            if let Some(encoding) = encoding {
                request = request.header(ACCEPT_ENCODING, encoding);
            }
            request.send()
        };

        let gzip = get(Some("gzip")).await.unwrap();
        assert_eq!(gzip.status(), StatusCode::OK, "{path}");
        assert_eq!(gzip.headers()[CONTENT_ENCODING], "gzip", "{path}");
        assert!(
            gzip.headers()[VARY]
                .to_str()
                .unwrap()
                .to_ascii_lowercase()
                .contains("accept-encoding"),
            "{path}"
        );
        let etag = gzip.headers()[ETAG].clone();
        let packed = gzip.bytes().await.unwrap();
        assert!(
            packed.len() < original.len(),
            "{path} is smaller compressed"
        );
        let mut unpacked = Vec::new();
        flate2::read::GzDecoder::new(&packed[..])
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, original, "{path} unpacks to the file");

        let br = get(Some("br;q=1.0, gzip;q=0.5")).await.unwrap();
        assert_eq!(br.headers()[CONTENT_ENCODING], "br", "{path}");
        assert_eq!(
            br.headers()[ETAG],
            etag,
            "one validator whatever the encoding"
        );
        assert!(br.bytes().await.unwrap().len() < original.len());

        let plain = get(None).await.unwrap();
        assert!(plain.headers().get(CONTENT_ENCODING).is_none(), "{path}");
        assert_eq!(plain.headers()[ETAG], etag);
        assert_eq!(plain.bytes().await.unwrap(), original, "{path}");
    }
}

/// A reload sends back the `ETag` it has and gets `304 Not Modified` with no body; a stale,
/// foreign or malformed `If-None-Match` gets the whole file. Each file has its own `ETag`.
#[tokio::test]
#[cfg_attr(
    test_store_postgres,
    ignore = "not about the store: run in the SQLite pass"
)]
async fn a_reload_revalidates_the_ui_files_instead_of_fetching_them() {
    let server = TestServer::start().await;
    let http = reqwest::Client::new();
    let etag_of = async |path: &str| {
        let response = http.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let etag = response.headers()[ETAG].to_str().unwrap().to_owned();
        assert!(
            etag.starts_with("W/\"") && etag.ends_with('"') && etag.len() > 10,
            "{etag}"
        );
        etag
    };
    let index = etag_of("/").await;
    let app = etag_of("/assets/app.js").await;
    let client = etag_of("/assets/client.js").await;
    assert!(index != app && app != client, "each file its own validator");

    let revalidate = async |path: &str, if_none_match: &str| {
        let response = http
            .get(server.url(path))
            .header(IF_NONE_MATCH, if_none_match)
            .header(ACCEPT_ENCODING, "gzip, br")
            .send()
            .await
            .unwrap();
        let status = response.status();
        let etag = response.headers().get(ETAG).cloned();
        let body = response.bytes().await.unwrap();
        (status, etag, body.len())
    };
    let unchanged = revalidate("/assets/app.js", &app).await;
    assert_eq!(unchanged.0, StatusCode::NOT_MODIFIED);
    assert_eq!(unchanged.1.unwrap(), app.as_str());
    assert_eq!(unchanged.2, 0, "a 304 has no body");
    assert_eq!(revalidate("/", &index).await.0, StatusCode::NOT_MODIFIED);
    // Among others, strong or weak, or any at all.
    let listed = format!("\"0123\", {}, W/\"x\"", app.trim_start_matches("W/"));
    assert_eq!(
        revalidate("/assets/app.js", &listed).await.0,
        StatusCode::NOT_MODIFIED
    );
    assert_eq!(
        revalidate("/assets/app.js", "*").await.0,
        StatusCode::NOT_MODIFIED
    );

    for stale in [
        client.as_str(),
        "W/\"00000000000000000000000000000000\"",
        "W/",
        "\"",
        "",
        ",,,",
        &"W/\"a\", ".repeat(500),
    ] {
        let (status, _, len) = revalidate("/assets/app.js", stale).await;
        assert_eq!(status, StatusCode::OK, "{stale:?}");
        assert!(len > 0, "{stale:?} gets the file");
    }
    let missing = revalidate("/assets/nope.js", &app).await;
    assert_eq!(
        missing.0,
        StatusCode::NOT_FOUND,
        "no file, whatever the validator"
    );
}
