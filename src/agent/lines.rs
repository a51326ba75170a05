//! Framing of an agent process's stdout into lines, with a length cap that skips an
//! over-long line instead of failing.

use std::io;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// One stdout line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A line, without its `\n` (a `\r` before it is kept).
    Text(String),
    /// A line over the cap, skipped; its length in bytes.
    TooLong(usize),
}

/// Reads newline-delimited lines with a length cap; a longer line is skipped, not fatal.
/// Cancel-safe: its only await point is `fill_buf`, and state changes after it returns.
pub(crate) struct LineReader<R> {
    reader: BufReader<R>,
    buf: Vec<u8>,
    cap: usize,
    /// Bytes of an over-long line skipped so far.
    skipping: Option<usize>,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub(crate) fn new(reader: R, cap: usize) -> Self {
        LineReader {
            reader: BufReader::with_capacity(64 << 10, reader),
            buf: Vec::new(),
            cap,
            skipping: None,
        }
    }

    /// The next line; `None` at the end of the stream, where an unterminated last line is
    /// dropped (agents end every message with a newline: a partial one is a torn write).
    pub(crate) async fn next(&mut self) -> io::Result<Option<Line>> {
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(None);
            }
            let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], i + 1),
                None => (available, available.len()),
            };
            let ended = done > chunk.len();
            match self.skipping.as_mut() {
                Some(skipped) => *skipped += chunk.len(),
                None if self.buf.len() + chunk.len() > self.cap => {
                    self.skipping = Some(self.buf.len() + chunk.len());
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(chunk),
            }
            self.reader.consume(done);
            if ended {
                if let Some(skipped) = self.skipping.take() {
                    return Ok(Some(Line::TooLong(skipped)));
                }
                let line = std::mem::take(&mut self.buf);
                return Ok(Some(Line::Text(
                    String::from_utf8_lossy(&line).into_owned(),
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::ReadBuf;

    use super::*;

    /// A reader that hands out exactly one of its chunks per read.
    struct Chunks(VecDeque<Vec<u8>>);

    impl AsyncRead for Chunks {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(mut chunk) = self.0.pop_front() {
                let n = chunk.len().min(buf.remaining());
                buf.put_slice(&chunk[..n]);
                if n < chunk.len() {
                    self.0.push_front(chunk.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    /// Every line `reads` frame into under `cap`, until the end of the stream.
    async fn lines(cap: usize, reads: &[&str]) -> Vec<Line> {
        let chunks = reads.iter().map(|r| r.as_bytes().to_vec()).collect();
        let mut reader = LineReader::new(Chunks(chunks), cap);
        let mut out = Vec::new();
        while let Some(line) = reader.next().await.unwrap() {
            out.push(line);
        }
        assert!(
            reader.next().await.unwrap().is_none(),
            "the end stays the end"
        );
        out
    }

    fn text(s: &str) -> Line {
        Line::Text(s.to_owned())
    }

    #[tokio::test]
    async fn lines_split_across_reads_are_joined() {
        assert_eq!(
            lines(100, &["{\"a\":", "1}\n{\"b\"", ":2}\n{\"c\":3}\n{", "}\n"]).await,
            [
                text("{\"a\":1}"),
                text("{\"b\":2}"),
                text("{\"c\":3}"),
                text("{}")
            ]
        );
        assert_eq!(
            lines(100, &["one\ntwo", "\n", "\nthree\n"]).await,
            [text("one"), text("two"), text(""), text("three")]
        );
    }

    /// A line of exactly the cap passes; one byte more is skipped, however it arrives, and
    /// the next line is read normally.
    #[tokio::test]
    async fn a_line_over_the_cap_is_skipped_and_the_next_one_parses() {
        assert_eq!(
            lines(5, &["12345\n123456\n{}\n"]).await,
            [text("12345"), Line::TooLong(6), text("{}")]
        );
        assert_eq!(
            lines(5, &["123", "45", "6789", "0123", "\nok\n"]).await,
            [Line::TooLong(13), text("ok")]
        );
        assert_eq!(
            lines(5, &["1234567890", "\n", "12345\n"]).await,
            [Line::TooLong(10), text("12345")]
        );
    }

    #[tokio::test]
    async fn an_unterminated_last_line_is_dropped_at_the_end() {
        assert_eq!(lines(100, &["done\n{\"trunc"]).await, [text("done")]);
        assert_eq!(lines(5, &["ok\n1234567"]).await, [text("ok")]);
        assert_eq!(lines(100, &[]).await, []);
    }

    /// The reader splits on `\n` only: a `\r` stays in the line (JSON parsing takes it as
    /// whitespace) and an empty line is an empty text (skipped by the reader's caller).
    #[tokio::test]
    async fn crlf_and_empty_lines_are_returned_as_they_are() {
        assert_eq!(
            lines(100, &["{\"a\":1}\r\n\n\r\n{\"b\":2}\n"]).await,
            [text("{\"a\":1}\r"), text(""), text("\r"), text("{\"b\":2}")]
        );
    }

    /// Bytes that are not UTF-8 are replaced, not fatal.
    #[tokio::test]
    async fn invalid_utf8_is_replaced() {
        let chunks = VecDeque::from([b"a\xffb\n".to_vec()]);
        let mut reader = LineReader::new(Chunks(chunks), 100);
        assert_eq!(reader.next().await.unwrap(), Some(text("a\u{fffd}b")));
    }
}
