//! `history`: what listing and searching conversations cost as the stored history grows. One
//! agentmux server per engine (SQLite, and PostgreSQL when a server URL is given) is filled by
//! imports of conversations whose words follow a Zipf law, like a language's, up to each size
//! in turn; at each size one client times, one request at a time, the first page of the
//! listing (with and without its count), a page far down it by cursor, and searches for a word
//! one conversation holds, a word none holds, a word in about 1 % of the messages, a word in
//! nearly all of them, two- and four-letter prefixes, and two words.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{Value, json};

use crate::engines::{PgServer, in_database};
use crate::report::{Machine, Percentiles, title};
use crate::servers::{Server, Tweaks};
use crate::wire::{http_get, http_request};

/// Distinct words of the generated language.
const VOCABULARY: usize = 50_000;
/// Words of a prompt, and of a reply.
const PROMPT_WORDS: usize = 12;
const REPLY_WORDS: usize = 40;
/// Rank of the word searched as "in about 1 % of the messages": a message of `n` words holds
/// the word of rank `r` with a chance of about `n / (H · (r + 1))`, H ≈ 11.4 for this
/// vocabulary, so about 1 % of the messages (of 26 words on average) hold rank 227.
const ONE_PERCENT_RANK: usize = 227;
/// The word only the first conversation holds, in its first prompt; and a word no message holds.
/// Generated words are made of other letters, so neither is ever generated.
const RARE_WORD: &str = "zanzibar";
const MISSING_WORD: &str = "quixotic";
/// Letters of generated words.
const LETTERS: &[u8] = b"abcdefghijklmnoprstuvw";
/// Imports running at once (the server's default cap on a principal's transfers).
const IMPORTS_AT_ONCE: usize = 2;
/// How deep the listing page timed by cursor is, in pages of [`PAGE`].
const DEEP_PAGES: usize = 20;
const PAGE: usize = 50;
/// Longest an import or a timed request may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(300);

/// What `agentmux bench history` measured.
#[derive(Debug, Serialize)]
pub struct HistoryReport {
    /// Always `history`.
    pub scenario: &'static str,
    /// Where it ran.
    pub machine: Machine,
    /// The scenario's parameters.
    pub params: Value,
    /// One row per engine, size and request.
    pub rows: Vec<HistoryRow>,
}

/// The timings of one request at one size on one engine.
#[derive(Debug, Serialize)]
pub struct HistoryRow {
    /// `sqlite` or `postgres`.
    pub engine: &'static str,
    /// Stored messages (imported ones; each conversation has one `imported` status more).
    pub messages: u64,
    /// Conversations.
    pub conversations: u64,
    /// What was asked.
    pub request: String,
    /// Latencies of the answers, including the client's connection.
    pub latency: Percentiles,
    /// Conversations on the first page (for a search: found, at most a page).
    pub found: usize,
    /// Answers that were errors (a search stopped at its time limit, ...).
    pub errors: u64,
    /// Messages the server stored per second while it was filled up to this size.
    pub import_messages_per_sec: f64,
}

impl HistoryReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = title(self.scenario, &self.machine, &self.params);
        out.push_str(&format!(
            "{:<9} {:>10} {:>8} {:<38} {:>9} {:>9} {:>9} {:>6} {:>6} {:>10}\n",
            "engine",
            "messages",
            "convs",
            "request",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "found",
            "errors",
            "import/s"
        ));
        for r in &self.rows {
            let ms = |us: u64| us as f64 / 1000.0;
            out.push_str(&format!(
                "{:<9} {:>10} {:>8} {:<38} {:>9.2} {:>9.2} {:>9.2} {:>6} {:>6} {:>10.0}\n",
                r.engine,
                r.messages,
                r.conversations,
                r.request,
                ms(r.latency.p50_us),
                ms(r.latency.p90_us),
                ms(r.latency.p99_us),
                r.found,
                r.errors,
                r.import_messages_per_sec
            ));
        }
        out
    }
}

/// The sizes and counts of a run.
#[derive(Debug, Clone)]
pub struct HistoryLoad {
    /// Stored messages to measure at, ascending.
    pub messages: Vec<u64>,
    /// Messages per conversation (half prompts, half replies).
    pub per_conversation: u64,
    /// Requests timed per request kind and size.
    pub samples: usize,
}

/// Runs the scenario on SQLite, then on a database of its own on `store_server_url` when given
/// (dropped at the end).
pub async fn history(
    load: &HistoryLoad,
    store_server_url: Option<&str>,
) -> anyhow::Result<HistoryReport> {
    let language = Language::new();
    let mut rows = run_on("sqlite", None, load, &language).await?;
    let mut database = None;
    if let Some(url) = store_server_url {
        let pg = PgServer::parse(url)?;
        let name = format!("agentmux_bench_{}_history", uuid::Uuid::new_v4().simple());
        rows.extend(
            in_database(&pg, &name, async |url: &str| {
                run_on("postgres", Some(url), load, &language).await
            })
            .await?,
        );
        database = Some(name);
    }
    Ok(HistoryReport {
        scenario: "history",
        machine: Machine::this(),
        params: json!({
            "messages": load.messages,
            "per_conversation": load.per_conversation,
            "samples": load.samples,
            "vocabulary": VOCABULARY,
            "words_per_prompt": PROMPT_WORDS,
            "words_per_reply": REPLY_WORDS,
            "database": database,
        }),
        rows,
    })
}

/// One engine's run: a server on a fresh store (the SQLite file, or the database at `url`),
/// filled up to each size in turn and measured there.
async fn run_on(
    engine: &'static str,
    url: Option<&str>,
    load: &HistoryLoad,
    language: &Language,
) -> anyhow::Result<Vec<HistoryRow>> {
    let data = tempfile::tempdir()?;
    let mut tweaks = Tweaks::default();
    if let Some(url) = url {
        // The URL may hold a password: the environment, not the command line.
        tweaks
            .env
            .push(("AGENTMUX_STORE_URL".to_owned(), url.to_owned()));
    }
    let mut server = Server::start_in(data.path(), &tweaks).await?;
    let outcome = async {
        let mut rows = Vec::new();
        let mut conversations = 0;
        for &size in &load.messages {
            let target = size.div_ceil(load.per_conversation);
            let started = Instant::now();
            fill(
                &server,
                language,
                conversations,
                target,
                load.per_conversation,
            )
            .await?;
            let rate = ((target - conversations) * load.per_conversation) as f64
                / started.elapsed().as_secs_f64();
            conversations = target;
            eprintln!("{engine}: {size} messages in {conversations} conversations; timing");
            for (request, path) in requests(&server, language).await? {
                let (latency, found, errors) = time(&server, &path, load.samples).await?;
                rows.push(HistoryRow {
                    engine,
                    messages: conversations * load.per_conversation,
                    conversations,
                    request,
                    latency,
                    found,
                    errors,
                    import_messages_per_sec: rate,
                });
            }
        }
        anyhow::Ok(rows)
    }
    .await;
    server.kill().await;
    outcome
}

/// Imports conversations `from..to`, [`IMPORTS_AT_ONCE`] at a time.
async fn fill(
    server: &Server,
    language: &Language,
    from: u64,
    to: u64,
    per_conversation: u64,
) -> anyhow::Result<()> {
    let mut next = from;
    while next < to {
        let batch: Vec<u64> = (next..to.min(next + IMPORTS_AT_ONCE as u64)).collect();
        next += batch.len() as u64;
        let imports = batch.iter().map(|&n| {
            let body = language.conversation(n, per_conversation);
            let addr = server.addr.clone();
            async move {
                let path = format!("/api/sessions/import?agent_id=history-{n}");
                let (status, answer) = http_request(
                    &addr,
                    "POST",
                    &path,
                    Some(("application/x-ndjson", body.as_bytes())),
                    REQUEST_LIMIT,
                )
                .await?;
                anyhow::ensure!(status == 201, "import {n} answered {status}: {answer}");
                anyhow::Ok(())
            }
        });
        for outcome in futures_util::future::join_all(imports).await {
            outcome?;
        }
    }
    Ok(())
}

/// The requests timed at each size: labels and paths.
async fn requests(server: &Server, language: &Language) -> anyhow::Result<Vec<(String, String)>> {
    let mut before = None;
    let mut path = format!("/api/sessions?limit={PAGE}");
    for _ in 0..DEEP_PAGES {
        let (status, body) = http_get(&server.addr, &path).await?;
        anyhow::ensure!(status == 200, "listing answered {status}: {body}");
        let page: Value = serde_json::from_str(&body)?;
        match page["next_before"].as_str() {
            Some(token) => {
                before = Some(token.to_owned());
                path = format!("/api/sessions?limit={PAGE}&before={token}");
            }
            None => break,
        }
    }
    let search = |q: &str| format!("/api/sessions?limit={PAGE}&q={q}");
    let mut requests = vec![
        (
            "listing: first page".to_owned(),
            format!("/api/sessions?limit={PAGE}"),
        ),
        (
            "listing: first page, total=true".to_owned(),
            format!("/api/sessions?limit={PAGE}&total=true"),
        ),
    ];
    if let Some(token) = before {
        requests.push((
            format!("listing: a page {DEEP_PAGES} deep (before)"),
            format!("/api/sessions?limit={PAGE}&before={token}"),
        ));
    }
    let common = language.word(0);
    let two: String = common.chars().take(2).collect();
    let long = (0..VOCABULARY)
        .map(|rank| language.word(rank))
        .find(|w| w.len() >= 7)
        .expect("a long word");
    let four: String = long.chars().take(4).collect();
    requests.extend([
        (
            format!("search: in 1 conversation ({RARE_WORD})"),
            search(RARE_WORD),
        ),
        (
            format!("search: in none ({MISSING_WORD})"),
            search(MISSING_WORD),
        ),
        (
            format!(
                "search: in ~1% of messages ({})",
                language.word(ONE_PERCENT_RANK)
            ),
            search(language.word(ONE_PERCENT_RANK)),
        ),
        (
            format!("search: in ~all messages ({common})"),
            search(common),
        ),
        (format!("search: 2-letter prefix ({two})"), search(&two)),
        (format!("search: 4-letter prefix ({four})"), search(&four)),
        (
            format!(
                "search: 2 words ({} {})",
                language.word(ONE_PERCENT_RANK),
                common
            ),
            search(&format!("{}%20{common}", language.word(ONE_PERCENT_RANK))),
        ),
    ]);
    Ok(requests)
}

/// Times `samples` GETs of `path`, one at a time: the latencies, the conversations on the last
/// answer's page, and the answers that were errors.
async fn time(
    server: &Server,
    path: &str,
    samples: usize,
) -> anyhow::Result<(Percentiles, usize, u64)> {
    let mut latencies = Histogram::<u64>::new(3)?;
    let (mut found, mut errors) = (0, 0);
    for _ in 0..samples {
        let started = Instant::now();
        let (status, body) = http_request(&server.addr, "GET", path, None, REQUEST_LIMIT).await?;
        latencies.record(started.elapsed().as_micros() as u64)?;
        match status {
            200 => {
                let page: Value = serde_json::from_str(&body)?;
                found = page["sessions"].as_array().map_or(0, Vec::len);
            }
            _ => errors += 1,
        }
    }
    Ok((Percentiles::from(&latencies), found, errors))
}

/// The generated language: [`VOCABULARY`] words, drawn with a chance inversely proportional to
/// their rank (Zipf's law), from a seeded generator so that every run stores the same history.
pub struct Language {
    words: Vec<String>,
    /// Cumulative weights of the ranks, for drawing.
    cumulative: Vec<f64>,
}

impl Language {
    fn new() -> Self {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let words = (0..VOCABULARY)
            .map(|_| {
                let len = 3 + (rng.next() % 8) as usize;
                (0..len)
                    .map(|_| LETTERS[(rng.next() % LETTERS.len() as u64) as usize] as char)
                    .collect()
            })
            .collect();
        let mut total = 0.0;
        let cumulative = (0..VOCABULARY)
            .map(|rank| {
                total += 1.0 / (rank + 1) as f64;
                total
            })
            .collect();
        Language { words, cumulative }
    }

    /// The word of `rank` (0: the most common).
    fn word(&self, rank: usize) -> &str {
        &self.words[rank]
    }

    /// `n` words drawn with `rng`.
    fn text(&self, rng: &mut Rng, n: usize) -> String {
        let total = self.cumulative[VOCABULARY - 1];
        let words: Vec<&str> = (0..n)
            .map(|_| {
                let x = rng.unit() * total;
                let rank = self
                    .cumulative
                    .partition_point(|&c| c < x)
                    .min(VOCABULARY - 1);
                self.words[rank].as_str()
            })
            .collect();
        words.join(" ")
    }

    /// Conversation `n` as an export to import: `per_conversation` messages, prompts and
    /// replies in turn; the first conversation's first prompt holds [`RARE_WORD`].
    fn conversation(&self, n: u64, per_conversation: u64) -> String {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut out = String::new();
        for seq in 1..=per_conversation {
            let line = if seq % 2 == 1 {
                let mut text = self.text(&mut rng, PROMPT_WORDS);
                if n == 0 && seq == 1 {
                    text = format!("{RARE_WORD} {text}");
                }
                json!({"seq": seq, "message_type": "user",
                       "payload": {"type": "user", "message": {"role": "user", "content": text}}})
            } else {
                let text = self.text(&mut rng, REPLY_WORDS);
                json!({"seq": seq, "message_type": "assistant",
                       "payload": {"type": "assistant", "message": {"role": "assistant",
                           "content": [{"type": "text", "text": text}]}}})
            };
            out.push_str(&line.to_string());
            out.push('\n');
        }
        out
    }
}

/// xorshift64*: the same history on every run, without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_language_is_the_same_every_run_and_never_makes_the_planted_words() {
        let (a, b) = (Language::new(), Language::new());
        assert_eq!(a.conversation(3, 4), b.conversation(3, 4));
        assert!(a.conversation(0, 2).contains(RARE_WORD));
        assert!(!a.conversation(1, 100).contains(RARE_WORD));
        for word in &a.words {
            assert!(!word.contains(['q', 'x', 'y', 'z']), "{word}");
        }
        let lines: Vec<Value> = a
            .conversation(5, 4)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1]["message_type"], "assistant");
    }

    #[test]
    fn common_words_are_drawn_more_often() {
        let language = Language::new();
        let mut rng = Rng(7);
        let text = language.text(&mut rng, 20_000);
        let count = |w: &str| text.split(' ').filter(|x| *x == w).count();
        assert!(count(language.word(0)) > 10 * count(language.word(100)).max(1));
    }
}
