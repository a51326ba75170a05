//! Principals' own agent credentials: sealing and opening their values (AES-256-GCM, with a
//! key that is never in the database, each value bound to its principal, agent and name),
//! the start-up check that the configured key opens what is stored (re-sealing what an older
//! key sealed), and the environment a principal's agent gets from them.

use std::collections::BTreeMap;
use std::path::Path;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::config::CredentialsConfig;
use crate::store::Store;
use crate::store::credentials::SealedVar;

/// Seals and opens credential values with the configured keys: the first seals, every one
/// opens what it sealed.
pub struct Sealer {
    keys: Vec<(String, Aes256Gcm)>,
}

/// Shows the ids of the keys, never the keys.
impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Sealer").field("keys", &ids).finish()
    }
}

/// The name of a key: the start of a hash of it.
fn key_id(key: &[u8]) -> String {
    let digest = Sha256::new()
        .chain_update(b"agentmux credentials key\0")
        .chain_update(key)
        .finalize();
    hex::encode(&digest[..8])
}

/// What a sealed value is bound to.
fn bound_to(principal: &str, agent: &str, name: &str) -> Vec<u8> {
    [principal, agent, name].join("\0").into_bytes()
}

impl Sealer {
    /// The keys `config` names: `secret_key` (from `AGENTMUX_SECRET_KEY`), else each line of
    /// `key_file` (blank lines and `#` comments skipped); None when neither is set.
    ///
    /// # Errors
    /// When the file can't be read, or a key is not base64 of 32 bytes (the error names the
    /// line, never the key).
    pub fn from_config(config: &CredentialsConfig) -> anyhow::Result<Option<Self>> {
        let (texts, source) = match (&config.secret_key, &config.key_file) {
            (Some(key), _) => (vec![key.clone()], "AGENTMUX_SECRET_KEY".to_owned()),
            (None, Some(file)) => (read_key_file(file)?, format!("{}", file.display())),
            (None, None) => return Ok(None),
        };
        if texts.is_empty() {
            anyhow::bail!("{source} holds no secret key");
        }
        let mut keys = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let bytes = decode_key(text).ok_or_else(|| {
                anyhow::anyhow!(
                    "key {} of {source} is not a secret key: it must be 32 random bytes in \
                     base64 (`openssl rand -base64 32` makes one)",
                    i + 1
                )
            })?;
            let cipher = Aes256Gcm::new_from_slice(&bytes).expect("32 bytes");
            keys.push((key_id(&bytes), cipher));
        }
        Ok(Some(Sealer { keys }))
    }

    /// Seals `value` of variable `name` of `principal` for `agent` with the first key.
    pub fn seal(&self, principal: &str, agent: &str, name: &str, value: &str) -> SealedVar {
        let (id, cipher) = &self.keys[0];
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let aad = bound_to(principal, agent, name);
        let sealed = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: value.as_bytes(),
                    aad: &aad,
                },
            )
            .expect("AES-GCM seals any value this short");
        SealedVar {
            principal: principal.to_owned(),
            agent: agent.to_owned(),
            name: name.to_owned(),
            key_id: id.clone(),
            nonce: nonce.to_vec(),
            sealed,
            set_at: crate::protocol::now_rfc3339(),
        }
    }

    /// Opens a stored value.
    ///
    /// # Errors
    /// Says which key it needs, or that it does not open (a changed key, a row moved), never
    /// what it holds.
    pub fn open(&self, var: &SealedVar) -> Result<String, String> {
        let Some((_, cipher)) = self.keys.iter().find(|(id, _)| *id == var.key_id) else {
            return Err(format!(
                "it was sealed with the key {}, which is not among the configured keys ({})",
                var.key_id,
                self.ids().join(", ")
            ));
        };
        let Ok(nonce) = <[u8; 12]>::try_from(var.nonce.as_slice()) else {
            return Err("its nonce is damaged".into());
        };
        let aad = bound_to(&var.principal, &var.agent, &var.name);
        let clear = cipher
            .decrypt(
                &Nonce::from(nonce),
                Payload {
                    msg: &var.sealed,
                    aad: &aad,
                },
            )
            .map_err(|_| format!("it does not open with the key {}", var.key_id))?;
        String::from_utf8(clear).map_err(|_| "it does not open as text".into())
    }

    fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Whether `var` was sealed with a key other than the one that seals now.
    fn is_stale(&self, var: &SealedVar) -> bool {
        var.key_id != self.keys[0].0
    }
}

fn read_key_file(file: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the secret key file {} (credentials.key_file): {e}",
            file.display()
        )
    })?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// 32 bytes from base64 (standard or URL-safe, with or without padding).
fn decode_key(text: &str) -> Option<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let text = text.trim();
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .filter(|bytes| bytes.len() == 32)
}

/// At start: refuses to run when credentials are stored and the configured keys can't open
/// every one of them (no key, a wrong key, a key file that lost the old key), and seals anew
/// with the first key what an older key sealed, so that the older key can leave the file.
///
/// # Errors
/// A message saying what to set, naming keys by their ids only.
pub async fn check_stored(store: &dyn Store, sealer: Option<&Sealer>) -> anyhow::Result<()> {
    let stored = store.all_credentials().await?;
    if stored.is_empty() {
        return Ok(());
    }
    let Some(sealer) = sealer else {
        anyhow::bail!(
            "the store holds {} credential(s) that principals set, sealed with a secret key, and \
             no secret key is configured: set AGENTMUX_SECRET_KEY or credentials.key_file to \
             the key they were sealed with (docs/credentials.md)",
            stored.len()
        );
    };
    let mut resealed = 0;
    for var in &stored {
        let value = sealer.open(var).map_err(|why| {
            anyhow::anyhow!(
                "a stored credential ({} of principal `{}` for agent `{}`) can't be opened: \
                 {why}; the secret key (AGENTMUX_SECRET_KEY or credentials.key_file) is wrong \
                 or missing (docs/credentials.md)",
                var.name,
                var.principal,
                var.agent
            )
        })?;
        if sealer.is_stale(var) {
            let mut new = sealer.seal(&var.principal, &var.agent, &var.name, &value);
            new.set_at.clone_from(&var.set_at);
            store.reseal_credential(var, &new).await?;
            resealed += 1;
        }
    }
    if resealed > 0 {
        tracing::info!(
            credentials = resealed,
            "sealed credentials anew with the first key of the key file"
        );
    }
    Ok(())
}

/// The environment `principal`'s agent `agent` gets from their stored credentials (empty
/// when they have none, or no key is configured).
///
/// # Errors
/// When the store can't be read or a value does not open (never saying what it holds).
pub async fn env_of(
    store: &dyn Store,
    sealer: Option<&Sealer>,
    principal: &crate::protocol::Principal,
    agent: &str,
) -> Result<BTreeMap<String, String>, String> {
    let Some(sealer) = sealer else {
        return Ok(BTreeMap::new());
    };
    let stored = store
        .credentials_of(principal, Some(agent))
        .await
        .map_err(|e| format!("cannot read your credentials: {e}"))?;
    stored
        .iter()
        .map(|var| {
            sealer
                .open(var)
                .map(|value| (var.name.clone(), value))
                .map_err(|why| format!("your credential {} can't be used: {why}", var.name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealer(keys: &[[u8; 32]]) -> Sealer {
        let file = tempfile::NamedTempFile::new().unwrap();
        let text: Vec<String> = keys
            .iter()
            .map(|k| base64::engine::general_purpose::STANDARD.encode(k))
            .collect();
        std::fs::write(file.path(), format!("# keys\n{}\n", text.join("\n"))).unwrap();
        let config = CredentialsConfig {
            key_file: Some(file.path().to_owned()),
            ..CredentialsConfig::default()
        };
        Sealer::from_config(&config).unwrap().unwrap()
    }

    #[test]
    fn a_value_opens_only_with_its_key_and_in_its_own_row() {
        let one = sealer(&[[1; 32]]);
        let sealed = one.seal("alice", "claude", "ANTHROPIC_API_KEY", "sk-alice");
        assert!(!String::from_utf8_lossy(&sealed.sealed).contains("sk-alice"));
        assert_eq!(one.open(&sealed).as_deref(), Ok("sk-alice"));
        // Moved to another principal's row, or another name, it does not open.
        let moved = SealedVar {
            principal: "bob".into(),
            ..sealed.clone()
        };
        assert!(one.open(&moved).is_err());
        let renamed = SealedVar {
            name: "OPENAI_API_KEY".into(),
            ..sealed.clone()
        };
        assert!(one.open(&renamed).is_err());
        // Another key does not know it; a file with the new key first still opens it.
        let other = sealer(&[[2; 32]]);
        let refused = other.open(&sealed).unwrap_err();
        assert!(refused.contains(&sealed.key_id), "{refused}");
        let rotated = sealer(&[[2; 32], [1; 32]]);
        assert_eq!(rotated.open(&sealed).as_deref(), Ok("sk-alice"));
        assert!(rotated.is_stale(&sealed));
        assert!(!one.is_stale(&sealed));
        // A row whose nonce is not 12 bytes is refused, not a panic.
        for nonce in [
            vec![],
            sealed.nonce[..11].to_vec(),
            [sealed.nonce.clone(), vec![0]].concat(),
        ] {
            let damaged = SealedVar {
                nonce,
                ..sealed.clone()
            };
            assert_eq!(one.open(&damaged), Err("its nonce is damaged".to_owned()));
        }
    }

    #[test]
    fn a_key_must_be_32_bytes_of_base64_and_errors_never_show_it() {
        for bad in ["short", "bm90IDMyIGJ5dGVz", "!!!!"] {
            let config = CredentialsConfig {
                secret_key: Some(bad.into()),
                ..CredentialsConfig::default()
            };
            let err = Sealer::from_config(&config).unwrap_err().to_string();
            assert!(!err.contains(bad), "{err}");
            assert!(err.contains("32 random bytes"), "{err}");
        }
        let none = CredentialsConfig::default();
        assert!(Sealer::from_config(&none).unwrap().is_none());
    }
}
